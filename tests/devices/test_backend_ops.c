/* Every op a device claims, run through its kernel and compared with the
 * CPU kernel on the same inputs (like ggml's test-backend-ops). Cases use
 * random shapes' values, broadcast inputs (stride 0) and non-contiguous
 * ones (transposed, stepped slices, offsets). Each device buffer carries
 * sentinel bytes on both sides of the tensor, checked after the kernel to
 * catch out-of-bounds writes; a non-finite device value where the CPU's is
 * finite fails. A case the device does not claim (get_kernel NULL or
 * supports_op 0) is reported as skipped; an (op, dtype) the device claims
 * with no case here fails the test, so new kernels come with cases. The
 * elementwise cases come from the op table (tests/ew_rows.h): each row
 * with a device form gets cases in its dtypes and ranges. The float cases
 * run in f32 and again in f64 (bound 1e-12 there); the reductions, matmul
 * and softmax again in f16 and bf16 (half_tol), and the conversions among
 * bool, u8, i32, i64, f16, bf16, f32 and f64. Where the CPU has no half
 * kernel of an op, its reference is the CPU's f32 kernel on the inputs
 * widened, rounded once to half (oar's f32 route, what dispatch runs).
 * Runs for every device of the plugins built here (exit 77, skipped,
 * where there is no opencl device); `--plugins DIR` runs it on the devices
 * of the plugins in DIR instead and wants a cuda:0 there (CTest's
 * test_backend_ops_fake_cuda: the cuda plugin's host code with a fake
 * runtime and CPU loops, tests/devices/plugins/fake_cuda_plugin.c). */
#include "test.h"

#include "ops/op.h"
#include "compiler/ew_graphs.h"
#include "opencl_common.h"
#include "ew_rows.h"

#define GUARD 64 /* sentinel elements on each side */
#define SENTINEL 0xA5
#define MAX_IN 5 /* inputs of a case (batch_norm's five) */

typedef enum { L_CONTIG, L_TRANSPOSED, L_STEPPED, L_BROADCAST, L_NULL } layout;

typedef struct {
    oar_dtype dtype;
    int ndim;
    int64_t shape[4];
    layout lay;
    double lo, hi; /* value range; integers: [lo, hi) */
} in_spec;

typedef struct {
    const char *op;
    int n_in;
    in_spec in[MAX_IN];
    int ni, nf;
    int64_t i[12];
    double f[2];
    double tol; /* relative and absolute bound on |device - cpu| */
    bool special; /* put NaN/Inf/0 among the f32 values */
} tcase;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A CPU input with the spec's layout: a view of a larger or permuted
 * tensor for the non-contiguous layouts. Owned. */
static oar_tensor *make_input(const in_spec *s, bool special) {
    if (s->lay == L_NULL) return NULL;
    int nd = s->ndim;
    int64_t base[4];
    memcpy(base, s->shape, sizeof base);
    if (s->lay == L_TRANSPOSED && nd >= 2) {
        base[nd - 1] = s->shape[nd - 2];
        base[nd - 2] = s->shape[nd - 1];
    }
    if (s->lay == L_STEPPED && nd >= 1) base[nd - 1] = 2 * s->shape[nd - 1] + 1;
    if (s->lay == L_BROADCAST && nd >= 1) base[0] = 1;
    oar_tensor *b = oar_tensor_retain(oar_empty(s->dtype, nd, base, NULL));
    int64_t n = oar_tensor_numel(b);
    char *p = oar_tensor_data(b);
    size_t es = oar_dtype_size(s->dtype);
    for (int64_t i = 0; i < n; i++) {
        double v = s->lo + (s->hi - s->lo) * urand();
        if (oar_dtype_is_integral(s->dtype)) v = floor(v);
        if (s->dtype == OAR_BOOL) v = urand() < 0.5;
        if (special && oar_dtype_is_float(s->dtype) && i % 5 == 1) {
            static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
            v = sp[(i / 5) % 5];
        }
        oari_store_f64(p + (size_t)i * es, s->dtype, v);
        if (s->dtype == OAR_C64) ((float *)p)[2 * i + 1] = (float)(s->lo + (s->hi - s->lo) * urand());
        if (s->dtype == OAR_C128) ((double *)p)[2 * i + 1] = s->lo + (s->hi - s->lo) * urand();
    }
    oar_tensor *v = b;
    if (s->lay == L_TRANSPOSED && nd >= 2) v = oar_transpose(b, nd - 2, nd - 1);
    if (s->lay == L_STEPPED && nd >= 1) v = oar_slice(b, nd - 1, 1, 2 * s->shape[nd - 1] + 1, 2);
    if (s->lay == L_BROADCAST && nd >= 1) v = oar_expand(b, nd, s->shape);
    v = oar_tensor_retain(v);
    oar_tensor_release(b);
    return v;
}

/* Kernel view of t broadcast to (nd, shape), as dispatch makes it. */
static void kview(const oar_tensor *t, bool bcast, int nd, const int64_t *shape, oar_ktensor *k) {
    oari_ktensor(t, k);
    if (!bcast || (t->ndim == nd && !memcmp(t->shape, shape, (size_t)nd * sizeof *shape))) return;
    int lead = nd - t->ndim;
    k->ndim = nd;
    for (int i = nd - 1; i >= 0; i--) {
        int src = i - lead;
        bool b = src < 0 || t->shape[src] != shape[i];
        k->shape[i] = shape[i];
        k->strides[i] = b ? 0 : t->strides[src];
    }
}

/* A device buffer holding `nbytes` from host `src` between two sentinel
 * zones of GUARD elements of size es. */
static void *guarded_upload(oar_device *d, const void *src, size_t nbytes, size_t es) {
    size_t g = GUARD * es, total = nbytes + 2 * g;
    unsigned char *h = malloc(total);
    memset(h, SENTINEL, total);
    if (src) memcpy(h + g, src, nbytes);
    void *buf = d->iface->alloc(d->ctx, d->index, total);
    if (buf && d->iface->copy_to_device(d->ctx, d->index, buf, 0, h, total)) buf = NULL;
    free(h);
    return buf;
}

static int n_run, n_skipped, n_half_run;
static bool covered[OARI_OP_COUNT][OAR_DTYPE_COUNT];

static bool is_half(oar_dtype dt) { return dt == OAR_F16 || dt == OAR_BF16; }

static double worst_error(const char *what, const oar_tensor *cpu, const unsigned char *dev,
                          double tol, bool *bad) {
    double worst = 0;
    /* complex: its real and imaginary parts, each a real element */
    const bool cx = cpu->dtype == OAR_C64 || cpu->dtype == OAR_C128;
    const oar_dtype dt = cpu->dtype == OAR_C64 ? OAR_F32 : cpu->dtype == OAR_C128 ? OAR_F64 : cpu->dtype;
    size_t es = oar_dtype_size(dt);
    const char *c = oar_tensor_data(cpu);
    for (int64_t i = 0; i < cpu->numel * (cx ? 2 : 1); i++) {
        /* cpu is contiguous here (an output, or an in-place target's clone) */
        double want = oari_load_f64(c + (size_t)i * es, dt);
        double got = oari_load_f64(dev + (size_t)i * es, dt);
        if (isnan(want) && isnan(got)) continue;
        if (isinf(want) && got == want) continue;
        if (!isfinite(got) && isfinite(want)) {
            fprintf(stderr, "%s: element %lld is %g on the device, %g on the CPU\n", what,
                    (long long)i, got, want);
            *bad = true;
            return INFINITY;
        }
        double e = fabs(got - want) / (1 + fabs(want));
        if (!(e <= worst)) worst = e;
    }
    if (!(worst <= tol)) *bad = true;
    return worst;
}

/* Runs the CPU's kernel kc on the call cc (in: the inputs' views, out: the
 * outputs, contiguous). via_f32: kc is the f32 kernel of an op the CPU has
 * no half kernel of; it runs on f32 copies of the half inputs into f32
 * outputs, each then rounded once into out (oar's f32 route). */
static int cpu_reference(oar_kernel_fn kc, bool via_f32, const oar_kernel_call *cc, bool bcast, int n_in,
                         oar_tensor *const *in, int n_out, oar_tensor *const *out) {
    if (!via_f32) return kc(oari_device_cpu()->ctx, cc);
    oar_ktensor fin[MAX_IN], fout[4];
    oar_tensor *fo[4] = {0};
    int st = 0;
    for (int i = 0; i < n_in && !st; i++) {
        fin[i] = cc->in[i];
        if (!in[i] || !is_half(in[i]->dtype)) continue;
        oar_tensor *w = oar_cast(in[i], OAR_F32); /* the pool's */
        if (!w) st = -1;
        else kview(w, bcast, out[0]->ndim, out[0]->shape, &fin[i]);
    }
    for (int j = 0; j < n_out && !st; j++) {
        fo[j] = oari_tensor_empty(NULL, is_half(out[j]->dtype) ? OAR_F32 : out[j]->dtype, out[j]->ndim,
                                  out[j]->shape);
        if (!fo[j]) st = -1;
        else oari_ktensor(fo[j], &fout[j]);
    }
    oar_kernel_call fc = *cc;
    fc.in = fin;
    fc.out = fout;
    if (!st) st = kc(oari_device_cpu()->ctx, &fc);
    for (int j = 0; j < n_out; j++) {
        if (!st) {
            size_t es = oar_dtype_size(out[j]->dtype), fs = oar_dtype_size(fo[j]->dtype);
            char *o = oar_tensor_data(out[j]);
            const char *f = oar_tensor_data(fo[j]);
            for (int64_t e = 0; e < out[j]->numel; e++)
                oari_store_f64(o + (size_t)e * es, out[j]->dtype, oari_load_f64(f + (size_t)e * fs, fo[j]->dtype));
        }
        oar_tensor_release(fo[j]);
    }
    return st;
}

static void run_case(oar_device *dev, const tcase *tc) {
    oar_pool *pool = oar_pool_push();
    int op = oari_op_lookup(tc->op);
    CHECK(op >= 0);
    if (op < 0) return;
    const oari_op_def *def = oari_op_defs[op];
    bool inplace = def->flags & OARI_F_INPLACE;
    oar_tensor *in[MAX_IN] = {0};
    for (int i = 0; i < tc->n_in; i++) in[i] = make_input(&tc->in[i], tc->special);
    oari_attrs attrs = {.ni = tc->ni, .nf = tc->nf};
    memcpy(attrs.i, tc->i, sizeof tc->i);
    memcpy(attrs.f, tc->f, sizeof tc->f);

    oari_infer c;
    memset(&c, 0, sizeof c);
    c.op = def->name;
    c.n_in = tc->n_in;
    c.in = in;
    c.attrs = &attrs;
    for (int i = 0; i < tc->n_in; i++) c.in_dtype[i] = in[i] ? in[i]->dtype : OAR_F32;
    c.kernel_dtype = in[0]->dtype;
    char label[160], to[40] = "";
    if (!strcmp(tc->op, "cast")) snprintf(to, sizeof to, " to %s", oar_dtype_name((oar_dtype)tc->i[0]));
    snprintf(label, sizeof label, "%s(%s%s%s%s)", tc->op, oar_dtype_name(in[0]->dtype), to,
             tc->in[0].lay == L_TRANSPOSED ? ", transposed" : tc->in[0].lay == L_STEPPED ? ", stepped" : "",
             tc->n_in > 1 && tc->in[1].lay == L_BROADCAST ? ", broadcast" : "");
    int st = def->infer(&c);
    if (st) fprintf(stderr, "%s: bad case: %s\n", label, oar_last_error());
    CHECK(st == 0);
    for (int i = 0; i < tc->n_in && !st; i++)
        if (in[i] && c.in_dtype[i] != in[i]->dtype) {
            fprintf(stderr, "%s: bad case: input %d would be cast\n", label, i);
            CHECK(0);
            st = 1;
        }
    oar_kernel_fn kd = st ? NULL : oari_kernel_lookup(dev, (oari_op)op, c.kernel_dtype);
    oar_kernel_fn kc = st ? NULL : oari_kernel_lookup(oari_device_cpu(), (oari_op)op, c.kernel_dtype);
    bool via_f32 = !st && !kc && is_half(c.kernel_dtype) && !inplace; /* no CPU half kernel */
    if (via_f32) kc = oari_kernel_lookup(oari_device_cpu(), (oari_op)op, OAR_F32);
    oar_ktensor kin[MAX_IN], kout[4], din[MAX_IN], dout[4];
    int n_out = def->n_out;
    oar_tensor *out[4] = {0};
    if (!st) {
        if (inplace) { /* a fresh contiguous target */
            oar_tensor *t = oar_tensor_retain(oar_clone(in[0]));
            oar_tensor_release(in[0]);
            in[0] = t;
        }
        for (int j = 0; j < n_out; j++)
            out[j] = inplace ? oar_tensor_retain(in[0])
                             : oari_tensor_empty(NULL, c.out[j].dtype, c.out[j].ndim, c.out[j].shape);
        for (int i = 0; i < tc->n_in; i++) {
            if (!in[i]) {
                memset(&kin[i], 0, sizeof kin[i]);
                kin[i].dtype = -1;
            } else {
                kview(in[i], def->flags & OARI_F_BROADCAST, out[0]->ndim, out[0]->shape, &kin[i]);
            }
        }
        for (int j = 0; j < n_out; j++) oari_ktensor(out[j], &kout[j]);
        covered[op][c.kernel_dtype] = true;
    }
    bool claimed = kd != NULL;
    if (claimed && dev->iface->supports_op) {
        oar_ktensor raw[MAX_IN];
        for (int i = 0; i < tc->n_in; i++) {
            if (in[i]) oari_ktensor(in[i], &raw[i]);
            else {
                memset(&raw[i], 0, sizeof raw[i]);
                raw[i].dtype = -1;
            }
        }
        oar_kernel_call q = {.op = def->name, .n_in = tc->n_in, .in = raw, .n_iattr = attrs.ni,
                             .n_fattr = attrs.nf, .iattr = attrs.i, .fattr = attrs.f};
        claimed = dev->iface->supports_op(dev->ctx, dev->index, &q);
    }
    if (!st && !claimed) {
        printf("  skipped %-40s unsupported on %s\n", label, dev->name);
        n_skipped++;
    }
    if (!st && claimed) {
        /* device copies: inputs' whole storages, outputs fresh, all guarded */
        void *bufs[MAX_IN + 4] = {0};
        size_t sizes[MAX_IN + 4] = {0}, ess[MAX_IN + 4] = {0};
        for (int i = 0; i < tc->n_in; i++) {
            din[i] = kin[i];
            if (!in[i]) continue;
            size_t es = oar_dtype_size(in[i]->dtype);
            sizes[i] = in[i]->storage->nbytes;
            ess[i] = es;
            bufs[i] = guarded_upload(dev, in[i]->storage->data, sizes[i], es);
            CHECK(bufs[i] != NULL);
            din[i].buffer = bufs[i];
            din[i].data = NULL;
            din[i].offset += GUARD;
        }
        for (int j = 0; j < n_out; j++) {
            if (inplace) {
                dout[j] = din[0];
                continue;
            }
            size_t es = oar_dtype_size(out[j]->dtype);
            sizes[MAX_IN + j] = (size_t)out[j]->numel * es;
            ess[MAX_IN + j] = es;
            bufs[MAX_IN + j] = guarded_upload(dev, NULL, sizes[MAX_IN + j], es);
            CHECK(bufs[MAX_IN + j] != NULL);
            dout[j] = kout[j];
            dout[j].buffer = bufs[MAX_IN + j];
            dout[j].data = NULL;
            dout[j].offset = GUARD;
        }
        oar_kernel_call cc = {.op = def->name, .n_in = tc->n_in, .n_out = n_out, .in = kin,
                              .out = kout, .n_iattr = attrs.ni, .n_fattr = attrs.nf,
                              .iattr = attrs.i, .fattr = attrs.f};
        oar_kernel_call dc = cc;
        dc.in = din;
        dc.out = dout;
        CHECK(kc && cpu_reference(kc, via_f32, &cc, def->flags & OARI_F_BROADCAST, tc->n_in, in, n_out, out) == 0);
        int dst_ = kd(dev->ctx, &dc);
        if (dst_) fprintf(stderr, "%s: device kernel failed: %s\n", label, oar_last_error());
        CHECK(dst_ == 0);
        if (dev->iface->synchronize) dev->iface->synchronize(dev->ctx, dev->index);
        bool bad = false;
        double worst = 0;
        for (int j = 0; j < n_out; j++) {
            int b = inplace ? 0 : MAX_IN + j;
            size_t g = GUARD * ess[b], total = sizes[b] + 2 * g;
            unsigned char *h = malloc(total);
            CHECK(dev->iface->copy_to_host(dev->ctx, dev->index, h, bufs[b], 0, total) == 0);
            for (size_t q = 0; q < g; q++)
                if (h[q] != SENTINEL || h[total - 1 - q] != SENTINEL) {
                    fprintf(stderr, "%s: output %d: write outside the tensor (sentinel at byte "
                            "%zu changed)\n", label, j, h[q] != SENTINEL ? q : total - 1 - q);
                    bad = true;
                    break;
                }
            /* inputs' sentinels too: a kernel must not write its inputs */
            worst = fmax(worst, worst_error(label, out[j], h + g, tc->tol, &bad));
            free(h);
            if (inplace) break;
        }
        for (int i = 0; i < tc->n_in && !inplace; i++) {
            if (!bufs[i]) continue;
            size_t g = GUARD * ess[i], total = sizes[i] + 2 * g;
            unsigned char *h = malloc(total);
            CHECK(dev->iface->copy_to_host(dev->ctx, dev->index, h, bufs[i], 0, total) == 0);
            if (memcmp(h + g, in[i]->storage->data, sizes[i])) {
                fprintf(stderr, "%s: input %d was modified by the device kernel\n", label, i);
                bad = true;
            }
            free(h);
        }
        printf("  %-4s    %-40s max error %.3g (bound %.3g)\n", bad ? "FAIL" : "ok", label, worst,
               tc->tol);
        CHECK(!bad);
        n_run++;
        n_half_run += is_half(c.kernel_dtype);
        for (int b = 0; b < MAX_IN + 4; b++)
            if (bufs[b]) dev->iface->free(dev->ctx, dev->index, bufs[b], sizes[b] + 2 * GUARD * ess[b]);
    }
    for (int i = 0; i < tc->n_in; i++) oar_tensor_release(in[i]);
    for (int j = 0; j < n_out; j++) oar_tensor_release(out[j]);
    oar_pool_pop(pool);
}

#define SH(...) {__VA_ARGS__}

/* The floating-point dtype of the float cases: each group runs for f32,
 * then f64 (on a device that claims it). tl(b): the f32 bound b, or for
 * f64 a bound of 1e-12 (f64 kernels compute and accumulate in double; the
 * OpenCL built-ins are within a few (pow, erf: 16) ulp, and the measure is
 * |device - cpu| / (1 + |cpu|)); exact results keep 0. */
static oar_dtype FD = OAR_F32;
static double tl(double f32_bound) { return FD == OAR_F64 ? 1e-12 : f32_bound; }

/* The bound of an f16 or bf16 result made from n terms (1: a conversion).
 * A half result is a float value rounded once to half, on the device (the
 * cuda kernels compute in f32: cuBLAS with f32 accumulation, reductions,
 * softmax) and on the CPU (its half kernel, or its f32 kernel rounded: the
 * f32 route); a conversion from f64 may round twice (through f32) on one
 * side and once on the other. The two float values differ by the rounding
 * of n terms summed in another order (Kahan or tree sums, Tensor Core
 * tiles, another exp), at most about n 2^-24 of the terms' size, about
 * 1 + |result| in these cases; rounding to half then lands at most one
 * ulp apart: 2^-10 of the value in f16 (11 significant bits, ~1e-3), 2^-7
 * in bf16 (8 bits, ~1e-2). So one half ulp, plus n 2^-23. */
static double half_tol(oar_dtype dt, int64_t n) {
    return (dt == OAR_BF16 ? 0x1p-7 : 0x1p-10) + (double)n * 0x1p-23;
}
/* tl in the groups that also run in half (n: the terms of one result) */
static double tl_n(double f32_bound, int64_t n) { return is_half(FD) ? half_tol(FD, n) : tl(f32_bound); }

/* The attributes a row's device cases give it (the rows that take some). */
static void row_attrs(tcase *t, int lay) {
    if (!strcmp(t->op, "leaky_relu")) t->nf = 1, t->f[0] = 0.07;
    if (!strcmp(t->op, "elu")) t->nf = 1, t->f[0] = 1.3;
    if (!strcmp(t->op, "softplus")) t->nf = 2, t->f[0] = 1.5, t->f[1] = 4;
    if (!strcmp(t->op, "clamp")) t->nf = 2, t->f[0] = -1, t->f[1] = lay == 1 ? NAN : 0.5;
    if (!strcmp(t->op, "gelu")) t->ni = 1, t->i[0] = lay == 2;
}

/* Whether the device claims a kernel of the row r (unary f32): the plugin's
 * list is the table's, so a row with a device form must be claimed. */
static void check_claimed(oar_device *dev, const ew_test_row *r) {
    if (strncmp(dev->name, "opencl", 6) || !(r->gen & EW_K_R) || FD != OAR_F32) return;
    bool claimed = oari_kernel_lookup(dev, (oari_op)oari_op_lookup(r->op), OAR_F32) != NULL;
    if (!claimed) fprintf(stderr, "%s has a device form in the table; %s claims no kernel\n", r->op, dev->name);
    CHECK(claimed);
}

/* The other dtypes of the gen column, each once (in the f32 round). */
static const oar_dtype other_dts[] = {OAR_BOOL, OAR_U8, OAR_I32, OAR_I64};
static bool gen_has(const ew_test_row *r, oar_dtype d) {
    return r->gen & (d == OAR_BOOL ? EW_K_B : EW_K_I);
}

/* Every unary row of the elementwise table with a device form: float
 * inputs in the row's range, three layouts, then NaN, infinities, zeros;
 * the bool/integer forms once. */
static void unary_cases(oar_device *dev) {
    for (int u = 0; u < EW_N_TEST_ROWS; u++) {
        const ew_test_row *r = &ew_test_rows[u];
        if (r->n_in != 1 || !r->gen) continue;
        check_claimed(dev, r);
        if (r->gen & EW_K_R) {
            for (int lay = 0; lay < 3; lay++) {
                tcase t = {.op = r->op, .n_in = 1, .tol = tl(2e-6)};
                t.in[0] = (in_spec){FD, 2, SH(7, 33), (layout)lay, r->lo, r->hi};
                row_attrs(&t, lay);
                run_case(dev, &t);
            }
            tcase t = {.op = r->op, .n_in = 1, .tol = tl(2e-6), .special = true};
            t.in[0] = (in_spec){FD, 1, SH(40), L_CONTIG, r->lo, r->hi};
            row_attrs(&t, 0);
            run_case(dev, &t);
        }
        for (int k = 0; k < 4 && FD == OAR_F32; k++) {
            if (!gen_has(r, other_dts[k])) continue;
            tcase t = {.op = r->op, .n_in = 1, .tol = 0};
            t.in[0] = (in_spec){other_dts[k], 2, SH(6, 9), L_STEPPED, 0, 3};
            run_case(dev, &t);
        }
    }
}

/* Every binary (and ternary) row with a device form: three layouts and
 * broadcasts in the row's ranges; comparisons on integral values (so that
 * equality occurs); the bool/integer forms once. */
static void binary_cases(oar_device *dev) {
    for (int b = 0; b < EW_N_TEST_ROWS; b++) {
        const ew_test_row *r = &ew_test_rows[b];
        if (r->n_in != 2 || !r->gen) continue;
        check_claimed(dev, r);
        double alo = r->lo, ahi = r->hi, blo = r->blo, bhi = r->bhi;
        if (r->out_bool) alo = blo = -2, ahi = bhi = 2;
        if (r->gen & EW_K_R) {
            tcase t[3] = {
                {.op = r->op, .n_in = 2, .tol = tl(2e-6),
                 .in = {{FD, 2, SH(9, 20), L_CONTIG, alo, ahi}, {FD, 2, SH(9, 20), L_TRANSPOSED, blo, bhi}}},
                {.op = r->op, .n_in = 2, .tol = tl(2e-6),
                 .in = {{FD, 3, SH(3, 1, 5), L_STEPPED, alo, ahi}, {FD, 2, SH(4, 5), L_CONTIG, blo, bhi}}},
                {.op = r->op, .n_in = 2, .tol = tl(2e-6),
                 .in = {{FD, 2, SH(6, 7), L_BROADCAST, alo, ahi}, {FD, 0, SH(0), L_CONTIG, blo, bhi}}},
            };
            for (int k = 0; k < 3; k++) run_case(dev, &t[k]);
        }
        for (int k = 0; k < 4 && FD == OAR_F32; k++) {
            if (!gen_has(r, other_dts[k])) continue;
            tcase t = {.op = r->op, .n_in = 2, .tol = 0,
                       .in = {{other_dts[k], 2, SH(5, 6), L_TRANSPOSED, -3, 3},
                              {other_dts[k], 1, SH(6), L_STEPPED, -3, 3}}};
            if (other_dts[k] != OAR_I32 && other_dts[k] != OAR_I64) t.in[0].lo = t.in[1].lo = 0;
            run_case(dev, &t);
        }
    }
    const oar_dtype wdt[] = {FD, OAR_I32, OAR_I64, OAR_BOOL, OAR_U8};
    for (int k = 0; k < (FD == OAR_F32 ? 5 : 1); k++) { /* the others once */
        tcase w = {.op = "where", .n_in = 3, .tol = 0,
                   .in = {{OAR_BOOL, 2, SH(4, 6), L_STEPPED, 0, 2}, {wdt[k], 1, SH(6), L_CONTIG, -3, 3},
                          {wdt[k], 3, SH(2, 4, 1), L_CONTIG, -3, 3}}};
        if (wdt[k] == OAR_BOOL || wdt[k] == OAR_U8) w.in[1].lo = w.in[2].lo = 0;
        run_case(dev, &w);
    }
}

/* The bound of a conversion from `from` to `to`: exact, except a wider
 * float rounded to a half type (values here are integers or within 100,
 * which every type holds; bf16's 8 bits fit in f16's 11). */
static double convert_tol(oar_dtype from, oar_dtype to) {
    bool exact = !oar_dtype_is_float(from) || from == to || (from == OAR_BF16 && to == OAR_F16);
    return is_half(to) && !exact ? half_tol(to, 1) : 0;
}

static void conversion_cases(oar_device *dev) {
    static const oar_dtype dts[] = {OAR_BOOL, OAR_U8, OAR_I32, OAR_I64, OAR_F16, OAR_BF16, OAR_F32, OAR_F64};
    enum { N = sizeof dts / sizeof *dts };
    for (int a = 0; a < N; a++) {
        for (int b = 0; b < N; b++) {
            tcase t = {.op = "cast", .n_in = 1, .ni = 1, .i = {dts[b]}, .tol = convert_tol(dts[a], dts[b]),
                       .in = {{dts[a], 2, SH(5, 7), (layout)((a + b) % 3), 0, 100}}};
            bool fa = oar_dtype_is_float(dts[a]);
            if (fa) t.in[0].lo = -50.5; /* fractions truncate toward 0 */
            if (fa && dts[b] == OAR_U8) t.in[0].lo = 0;
            if (dts[a] == OAR_I32 || dts[a] == OAR_I64) t.in[0].lo = dts[b] == OAR_U8 ? 0 : -100;
            run_case(dev, &t);
        }
        tcase cg = {.op = "contiguous", .n_in = 1, .tol = 0,
                    .in = {{dts[a], 3, SH(3, 4, 5), L_TRANSPOSED, 0, 50}}};
        run_case(dev, &cg);
        tcase f = {.op = "fill", .n_in = 1, .nf = 2, .f = {3, 0}, .tol = 0,
                   .in = {{dts[a], 2, SH(4, 9), L_CONTIG, 0, 50}}};
        run_case(dev, &f);
        oar_dtype src = dts[(a + 2) % N];
        tcase cp = {.op = "copy", .n_in = 2, .tol = convert_tol(src, dts[a]),
                    .in = {{dts[a], 2, SH(4, 9), L_CONTIG, 0, 50}, {src, 1, SH(9), L_STEPPED, 0, 50}}};
        run_case(dev, &cp);
        if (is_half(dts[a])) { /* and from the other half type, each way */
            cp.in[1].dtype = dts[a] == OAR_F16 ? OAR_BF16 : OAR_F16;
            cp.tol = convert_tol(cp.in[1].dtype, dts[a]);
            run_case(dev, &cp);
        }
    }
}

/* In f16 and bf16: amax and amin exact (the result is one of the inputs);
 * prod over [0.9, 1.1] there, so that 1110 factors stay within f16. */
static void reduce_cases(oar_device *dev) {
    static const char *const ops[] = {"sum", "prod", "amax", "amin", NULL};
    static const int64_t masks[] = {1, 2, 4, 5, 7, 0};
    static const int64_t shape[] = {5, 6, 37};
    for (int r = 0; ops[r]; r++)
        for (int m = 0; m < 6; m++) {
            bool prod = !strcmp(ops[r], "prod"), minmax = !strcmp(ops[r], "amax") || !strcmp(ops[r], "amin");
            int64_t n = 1;
            for (int d = 0; d < 3; d++) n *= (masks[m] >> d) & 1 ? shape[d] : 1;
            double lo = prod ? (is_half(FD) ? 0.9 : 0.7) : -2, hi = prod ? (is_half(FD) ? 1.1 : 1.4) : 2;
            tcase t = {.op = ops[r], .n_in = 1, .ni = 2, .i = {masks[m], m & 1},
                       .tol = minmax && is_half(FD) ? 0 : tl_n(3e-6, n),
                       .in = {{FD, 3, SH(5, 6, 37), (layout)(m % 3), lo, hi}}};
            run_case(dev, &t);
        }
    tcase big = {.op = "sum", .n_in = 1, .ni = 2, .i = {1, 0}, .tol = tl_n(1e-5, 100000),
                 .in = {{FD, 1, SH(100000), L_CONTIG, -1, 1}}};
    run_case(dev, &big);
}

static void matmul_cases(oar_device *dev) {
    struct { int na; int64_t a[4]; int nb; int64_t b[4]; layout la, lb; } m[] = {
        {2, SH(5, 7), 2, SH(7, 3), L_CONTIG, L_CONTIG},
        {2, SH(37, 45), 2, SH(45, 19), L_TRANSPOSED, L_CONTIG},
        {2, SH(16, 32), 2, SH(32, 16), L_CONTIG, L_TRANSPOSED},
        {4, SH(2, 1, 5, 7), 3, SH(3, 7, 4), L_CONTIG, L_STEPPED},
        {3, SH(3, 6, 9), 3, SH(3, 9, 2), L_BROADCAST, L_CONTIG},
        {1, SH(7), 2, SH(7, 5), L_CONTIG, L_TRANSPOSED},
        {3, SH(2, 4, 7), 1, SH(7), L_CONTIG, L_STEPPED},
        {1, SH(33), 1, SH(33), L_STEPPED, L_CONTIG},
        {2, SH(70, 1), 2, SH(1, 50), L_CONTIG, L_CONTIG},
    };
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        tcase t = {.op = "matmul", .n_in = 2, .tol = tl_n(2e-5, m[k].b[m[k].nb == 1 ? 0 : m[k].nb - 2])};
        t.in[0] = (in_spec){FD, m[k].na, {0}, m[k].la, -1, 1};
        t.in[1] = (in_spec){FD, m[k].nb, {0}, m[k].lb, -1, 1};
        memcpy(t.in[0].shape, m[k].a, sizeof m[k].a);
        memcpy(t.in[1].shape, m[k].b, sizeof m[k].b);
        run_case(dev, &t);
    }
}

static void softmax_cases(oar_device *dev) {
    static const int64_t shape[] = {4, 7, 5};
    for (int lg = 0; lg < 2; lg++)
        for (int dim = 0; dim < 3; dim++) {
            tcase t = {.op = lg ? "log_softmax" : "softmax", .n_in = 1, .ni = 1, .i = {dim},
                       .tol = tl_n(3e-6, shape[dim]), .in = {{FD, 3, SH(4, 7, 5), (layout)dim, -8, 8}}};
            run_case(dev, &t);
        }
}

static void nn_cases(oar_device *dev) {
    tcase ln1 = {.op = "layer_norm", .n_in = 3, .ni = 1, .i = {1}, .nf = 1, .f = {1e-5}, .tol = tl(1e-5),
                 .in = {{FD, 2, SH(6, 10), L_TRANSPOSED, -3, 3}, {FD, 1, SH(10), L_CONTIG, 0.5, 2},
                        {FD, 1, SH(10), L_STEPPED, -1, 1}}};
    run_case(dev, &ln1);
    tcase ln2 = {.op = "layer_norm", .n_in = 3, .ni = 1, .i = {2}, .nf = 1, .f = {1e-3}, .tol = tl(1e-5),
                 .in = {{FD, 3, SH(3, 4, 5), L_STEPPED, -3, 3}, {.lay = L_NULL}, {.lay = L_NULL}}};
    run_case(dev, &ln2);
    tcase ga = {.op = "gather", .n_in = 2, .ni = 1, .i = {1}, .tol = 0,
                .in = {{FD, 2, SH(4, 6), L_TRANSPOSED, -3, 3}, {OAR_I64, 2, SH(3, 5), L_CONTIG, 0, 6}}};
    run_case(dev, &ga);
    tcase is = {.op = "index_select", .n_in = 2, .ni = 1, .i = {0}, .tol = 0,
                .in = {{FD, 2, SH(5, 4), L_STEPPED, -3, 3}, {OAR_I64, 1, SH(7), L_STEPPED, 0, 5}}};
    run_case(dev, &is);
    /* not claimed: reported as skipped */
    tcase c64 = {.op = "exp", .n_in = 1, .tol = 0, .in = {{OAR_C64, 1, SH(5), L_CONTIG, -1, 1}}};
    run_case(dev, &c64);
    tcase cc64 = {.op = "cast", .n_in = 1, .ni = 1, .i = {FD}, .tol = 0,
                  .in = {{OAR_C64, 1, SH(5), L_CONTIG, -1, 1}}};
    run_case(dev, &cc64);
    /* scatter_add: index smaller than x off dim, duplicates; a 0-d src */
    tcase sa = {.op = "scatter_add", .n_in = 3, .ni = 1, .i = {1}, .tol = tl(1e-6),
                .in = {{FD, 2, SH(4, 6), L_TRANSPOSED, -3, 3}, {OAR_I64, 2, SH(3, 9), L_CONTIG, 0, 6},
                       {FD, 2, SH(3, 9), L_STEPPED, -3, 3}}};
    run_case(dev, &sa);
    tcase sa0 = {.op = "scatter_add", .n_in = 3, .ni = 1, .i = {0}, .tol = tl(1e-6),
                 .in = {{FD, 2, SH(5, 3), L_CONTIG, -3, 3}, {OAR_I64, 2, SH(7, 3), L_TRANSPOSED, 0, 5},
                        {FD, 0, SH(0), L_CONTIG, -3, 3}}};
    run_case(dev, &sa0);
    tcase ia = {.op = "index_add", .n_in = 3, .ni = 1, .i = {0}, .tol = tl(1e-6),
                .in = {{FD, 2, SH(5, 4), L_CONTIG, -3, 3}, {OAR_I64, 1, SH(9), L_STEPPED, 0, 5},
                       {FD, 2, SH(9, 4), L_TRANSPOSED, -3, 3}}};
    run_case(dev, &ia);
    tcase is1 = {.op = "index_select", .n_in = 2, .ni = 1, .i = {1}, .tol = 0,
                 .in = {{FD, 3, SH(2, 5, 4), L_CONTIG, -3, 3}, {OAR_I64, 1, SH(3), L_CONTIG, 0, 5}}};
    run_case(dev, &is1);
}

/* group_norm (2 and 1 groups, weight and bias or none) and batch_norm
 * (training and eval, strided inputs, [N, C] and [N, C, H, W]); the
 * running stats in eval in x's dtype (dispatch casts them), in training
 * not read. */
static void channel_norm_cases(oar_device *dev) {
    tcase gn = {.op = "group_norm", .n_in = 3, .ni = 1, .i = {2}, .nf = 1, .f = {1e-5}, .tol = tl(1e-5),
                .in = {{FD, 4, SH(3, 4, 5, 6), L_STEPPED, -3, 3}, {FD, 1, SH(4), L_CONTIG, 0.5, 2},
                       {FD, 1, SH(4), L_STEPPED, -1, 1}}};
    run_case(dev, &gn);
    tcase gn1 = {.op = "group_norm", .n_in = 3, .ni = 1, .i = {1}, .nf = 1, .f = {1e-3}, .tol = tl(1e-5),
                 .in = {{FD, 3, SH(2, 6, 7), L_TRANSPOSED, -3, 3}, {.lay = L_NULL}, {.lay = L_NULL}}};
    run_case(dev, &gn1);
    tcase bn = {.op = "batch_norm", .n_in = 5, .ni = 1, .i = {1}, .nf = 1, .f = {1e-5}, .tol = tl(1e-5),
                .in = {{FD, 4, SH(5, 3, 4, 6), L_CONTIG, -3, 3}, {.lay = L_NULL}, {.lay = L_NULL},
                       {FD, 1, SH(3), L_CONTIG, 0.5, 2}, {FD, 1, SH(3), L_STEPPED, -1, 1}}};
    run_case(dev, &bn);
    tcase bn2 = {.op = "batch_norm", .n_in = 5, .ni = 1, .i = {1}, .nf = 1, .f = {1e-3}, .tol = tl(1e-5),
                 .in = {{FD, 2, SH(9, 4), L_TRANSPOSED, -3, 3}, {FD, 1, SH(4), L_CONTIG, -1, 1},
                        {FD, 1, SH(4), L_CONTIG, 0.5, 2}, {.lay = L_NULL}, {.lay = L_NULL}}};
    run_case(dev, &bn2);
    tcase ev = {.op = "batch_norm", .n_in = 5, .ni = 1, .i = {0}, .nf = 1, .f = {1e-5}, .tol = tl(1e-5),
                .in = {{FD, 3, SH(4, 3, 5), L_STEPPED, -3, 3}, {FD, 1, SH(3), L_CONTIG, -1, 1},
                       {FD, 1, SH(3), L_STEPPED, 0.5, 2}, {FD, 1, SH(3), L_CONTIG, 0.5, 2},
                       {FD, 1, SH(3), L_CONTIG, -1, 1}}};
    run_case(dev, &ev);
}

/* slice_backward (attributes dim, start, end, step, the full shape): a
 * stepped slice of dim 1 from a transposed gradient, a slice at an offset
 * of dim 0, and the last dim cut at 2/3 (an attention's qkv split) */
static void movement_cases(oar_device *dev) {
    tcase s1 = {.op = "slice_backward", .n_in = 1, .ni = 6, .i = {1, 1, 8, 3, 4, 9}, .tol = 0,
                .in = {{FD, 2, SH(4, 3), L_TRANSPOSED, -3, 3}}};
    run_case(dev, &s1);
    tcase s0 = {.op = "slice_backward", .n_in = 1, .ni = 7, .i = {0, 2, 5, 1, 6, 5, 2}, .tol = 0,
                .in = {{FD, 3, SH(3, 5, 2), L_STEPPED, -3, 3}}};
    run_case(dev, &s0);
    tcase s2 = {.op = "slice_backward", .n_in = 1, .ni = 7, .i = {2, 8, 12, 1, 2, 3, 12}, .tol = 0,
                .in = {{FD, 3, SH(2, 3, 4), L_CONTIG, -3, 3}}};
    run_case(dev, &s2);
}

static void conv_cases(oar_device *dev) {
    /* groups 2, stride (2, 1), padding (1, 0), dilation (1, 2); bias or none */
    for (int b = 0; b < 2; b++) {
        tcase t = {.op = "conv2d", .n_in = 3, .ni = 7, .i = {2, 1, 1, 0, 1, 2, 2}, .tol = tl(1e-5),
                   .in = {{FD, 4, SH(2, 4, 7, 6), L_TRANSPOSED, -1, 1},
                          {FD, 4, SH(6, 2, 3, 2), b ? L_STEPPED : L_CONTIG, -1, 1},
                          {FD, 1, SH(6), L_CONTIG, -1, 1}}};
        if (b) t.in[2].lay = L_NULL;
        run_case(dev, &t);
    }
    tcase tr = {.op = "conv_transpose2d", .n_in = 3, .ni = 9, .i = {2, 2, 1, 0, 1, 0, 1, 1, 1},
                .tol = tl(1e-5),
                .in = {{FD, 4, SH(2, 4, 5, 4), L_STEPPED, -1, 1},
                       {FD, 4, SH(4, 3, 3, 3), L_CONTIG, -1, 1}, {FD, 1, SH(3), L_CONTIG, -1, 1}}};
    run_case(dev, &tr);
    tcase tr2 = {.op = "conv_transpose2d", .n_in = 3, .ni = 9, .i = {1, 1, 0, 0, 0, 0, 2, 1, 2},
                 .tol = tl(1e-5),
                 .in = {{FD, 4, SH(1, 4, 3, 3), L_TRANSPOSED, -1, 1},
                        {FD, 4, SH(4, 2, 2, 2), L_CONTIG, -1, 1}, {.lay = L_NULL}}};
    run_case(dev, &tr2);
    tcase wg = {.op = "conv2d_weight_grad", .n_in = 2, .ni = 11,
                .i = {6, 2, 3, 2, 2, 1, 1, 0, 1, 2, 2}, .tol = tl(1e-5),
                .in = {{FD, 4, SH(2, 4, 7, 6), L_CONTIG, -1, 1},
                       {FD, 4, SH(2, 6, 4, 4), L_STEPPED, -1, 1}}};
    run_case(dev, &wg);
    for (int cm = 0; cm < 2; cm++) {
        tcase mp = {.op = "max_pool2d", .n_in = 1, .ni = 9, .i = {3, 2, 2, 2, 1, 0, 1, 2, cm},
                    .tol = 0, .in = {{FD, 4, SH(2, 3, 7, 8), cm ? L_TRANSPOSED : L_STEPPED, -3, 3}}};
        run_case(dev, &mp);
    }
    tcase mb = {.op = "max_pool2d_backward", .n_in = 2, .ni = 2, .i = {5, 6}, .tol = tl(1e-6),
                .in = {{FD, 4, SH(2, 3, 3, 4), L_TRANSPOSED, -1, 1},
                       {OAR_I64, 4, SH(2, 3, 3, 4), L_CONTIG, 0, 30}}};
    run_case(dev, &mb);
    /* avg_pool2d: kernel (3, 2), stride 2, padding (1, 0), ceil_mode, count_include_pad off, then on */
    for (int cip = 0; cip < 2; cip++) {
        tcase ap = {.op = "avg_pool2d", .n_in = 1, .ni = 8, .i = {3, 2, 2, 2, 1, 0, 1, cip}, .tol = tl(1e-6),
                    .in = {{FD, 4, SH(2, 3, 7, 8), cip ? L_TRANSPOSED : L_STEPPED, -3, 3}}};
        run_case(dev, &ap);
        tcase ab = {.op = "avg_pool2d_backward", .n_in = 1, .ni = 10, .i = {3, 2, 2, 2, 1, 0, 1, cip, 7, 8},
                    .tol = tl(1e-6), .in = {{FD, 4, SH(2, 3, 4, 4), cip ? L_STEPPED : L_TRANSPOSED, -1, 1}}};
        run_case(dev, &ab);
    }
}

/* The FFT ops (c2c both ways, r2c, c2r of odd and even lengths, each norm
 * mode) over one, two and three dims, in any order, of strided, stepped
 * and broadcast views; in c64/f32 (FD f32) and c128/f64. Four dims of
 * extent > 1 are beyond what the cuda plugin lays out for cuFFT (skipped
 * there). c2r's inputs are not Hermitian: the imaginary parts the
 * definition ignores must be ignored on the device too. */
static void fft_cases(oar_device *dev) {
    const oar_dtype cx = FD == OAR_F64 ? OAR_C128 : OAR_C64;
    /* (kind 0 c2c, 1 r2c, 2 c2r), rank, shape, k, dims, norm, forward or c2r's n, layout */
    static const struct { int kind, nd; int64_t shape[4]; int k; int64_t dims[4]; int norm; int64_t a1; layout lay; } f[] = {
        {0, 2, {3, 8}, 1, {1}, 0, 1, L_TRANSPOSED},
        {0, 3, {4, 3, 5}, 2, {2, 0}, 2, 0, L_STEPPED},
        {0, 4, {2, 3, 4, 5}, 3, {3, 1, 2}, 1, 1, L_CONTIG},
        {0, 3, {4, 6, 7}, 1, {1}, 1, 0, L_BROADCAST},
        {0, 4, {2, 3, 2, 3}, 4, {0, 1, 2, 3}, 0, 1, L_CONTIG},
        {1, 2, {5, 8}, 1, {1}, 0, 0, L_CONTIG},
        {1, 3, {6, 3, 7}, 2, {2, 0}, 1, 0, L_TRANSPOSED},
        {1, 3, {4, 5, 6}, 3, {0, 2, 1}, 2, 0, L_STEPPED},
        {2, 2, {4, 5}, 1, {1}, 2, 8, L_CONTIG},
        {2, 2, {3, 5}, 1, {1}, 0, 9, L_STEPPED},
        {2, 3, {4, 3, 4}, 2, {2, 0}, 1, 7, L_TRANSPOSED},
        {2, 2, {6, 5}, 2, {0, 1}, 0, 8, L_BROADCAST},
        {2, 3, {3, 4, 4}, 3, {1, 0, 2}, 2, 6, L_CONTIG},
    };
    static const char *const ops[] = {"fft_c2c", "fft_r2c", "fft_c2r"};
    for (size_t q = 0; q < sizeof f / sizeof *f; q++) {
        int64_t n = 1;
        for (int j = 0; j < f[q].k; j++) n *= f[q].kind == 2 && j == f[q].k - 1 ? f[q].a1 : f[q].shape[f[q].dims[j]];
        tcase t = {.op = ops[f[q].kind], .n_in = 1, .ni = 3 + f[q].k, .i = {f[q].norm, f[q].a1, f[q].k},
                   .tol = tl(3e-6 * log2((double)n + 1)),
                   .in = {{f[q].kind == 1 ? FD : cx, f[q].nd, {0}, f[q].lay, -1, 1}}};
        memcpy(t.in[0].shape, f[q].shape, sizeof f[q].shape);
        for (int j = 0; j < f[q].k; j++) t.i[3 + j] = f[q].dims[j];
        run_case(dev, &t);
    }
}

/* Every (op, dtype) the device claims must have had a case. */
static void check_coverage(oar_device *dev) {
    static const oar_dtype dts[] = {OAR_BOOL, OAR_U8, OAR_I32, OAR_I64, OAR_F16, OAR_BF16,
                                    OAR_F32, OAR_F64, OAR_C64, OAR_C128};
    int claimed = 0, claimed_f64 = 0;
    for (int op = 0; op < OARI_OP_COUNT; op++)
        for (int k = 0; k < 10; k++) {
            if (!oari_kernel_lookup(dev, (oari_op)op, dts[k])) continue;
            claimed++;
            claimed_f64 += dts[k] == OAR_F64;
            if (!covered[op][dts[k]]) {
                fprintf(stderr, "%s claims %s for %s, and no case here tests it\n", dev->name,
                        oari_op_name((oari_op)op), oar_dtype_name(dts[k]));
                CHECK(0);
            }
        }
    printf("%s: %d (op, dtype) kernels claimed (%d f64), %d cases run (%d f16/bf16), %d skipped as unsupported\n",
           dev->name, claimed, claimed_f64, n_run, n_half_run, n_skipped);
    /* cuda: the half cases name exactly what the plugin claims (a case of
     * an (op, half type) it does not claim is stale), and some ran */
    if (!strncmp(dev->name, "cuda", 4)) {
        for (int op = 0; op < OARI_OP_COUNT; op++)
            for (oar_dtype dt = OAR_F16; dt <= OAR_BF16; dt++)
                if (covered[op][dt] && !oari_kernel_lookup(dev, (oari_op)op, dt)) {
                    fprintf(stderr, "a case here tests %s in %s, which %s does not claim\n",
                            oari_op_name((oari_op)op), oar_dtype_name(dt), dev->name);
                    CHECK(0);
                }
        CHECK(n_half_run > 0);
    }
    /* OAR_OPENCL_NO_FP64=1 (a CTest variant): opencl claims no f64 kernel,
     * as on a device without cl_khr_fp64 */
    const char *no64 = getenv("OAR_OPENCL_NO_FP64");
    if (!strncmp(dev->name, "opencl", 6) && no64 && *no64 && strcmp(no64, "0")) CHECK(claimed_f64 == 0);
}

/* The code the compiler generates for the device (OpenCL C): every row of
 * the elementwise table in each dtype of its gen column, fused with its
 * reader (one kernel per row), run on the device against the CPU's
 * unfused graph. */
static void fused_forms(oar_device *dev) {
    if (strncmp(dev->name, "opencl", 6)) return; /* the CUDA forms: tests/compiler/test_cuda_codegen.c */
    oar_pool *outer = oar_pool_push(); /* the graphs' inputs */
    int rows = 0;
    for (size_t t = 0; t < sizeof ew_gen_dtypes / sizeof *ew_gen_dtypes; t++)
        for (int alt = 0; alt < 2; alt++) {
            oar_dtype dt = ew_gen_dtypes[t];
            if (dt == OAR_F64 && !oari_kernel_lookup(dev, OARI_OP_add, OAR_F64)) continue; /* no cl_khr_fp64 */
            ew_graph eg;
            for (int cursor = 0; ew_graph_next(&eg, dt, alt, &cursor);) {
                oar_pool *p = oar_pool_push();
                oar_graph *g = ew_graph_trace(&eg);
                oar_executor *plain = g ? oar_executor_new(g) : NULL, *fused = g ? oar_executor_new(g) : NULL;
                CHECK(fused && oar_executor_compile(fused) == 0);
                oar_tensor *din[3 * EW_GRAPH_ROWS], *y0[EW_GRAPH_ROWS] = {0}, *y1[EW_GRAPH_ROWS] = {0};
                for (int i = 0; i < eg.n_in; i++) din[i] = oar_tensor_to(eg.inputs[i], dev);
                CHECK(plain && oar_executor_run(plain, eg.inputs, y0) == 0);
                int st = fused ? oar_executor_run(fused, din, y1) : -1;
                if (st) fprintf(stderr, "%s: %s\n", oar_dtype_name(dt), oar_last_error());
                CHECK(st == 0);
                CHECK(fused && oar_executor_num_kernels(fused) == eg.n_rows);
                double tol = dt == OAR_F32 ? 2e-6 : dt == OAR_F64 ? 1e-12 : 0;
                for (int j = 0; j < eg.n_rows && !st; j++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s (%s%s) fused on %s", ew_test_rows[eg.rows[j]].op,
                             oar_dtype_name(dt), alt ? ", alt" : "", dev->name);
                    CHECK(ew_graph_same(y0[j], oar_tensor_to(y1[j], oar_device_cpu()), tol, what));
                }
                rows += eg.n_rows;
                oar_executor_free(plain);
                oar_executor_free(fused);
                oar_graph_free(g);
                ew_graph_free(&eg);
                oar_pool_pop(p);
            }
        }
    printf("%s: %d rows of the elementwise table fused and run\n", dev->name, rows);
    CHECK(rows > 60);
    oar_pool_pop(outer);
}

/* The case groups run in f32 and f64; those marked half again in f16 and
 * bf16 (the ops the cuda plugin claims in half types). */
static const struct {
    const char *name;
    void (*run)(oar_device *dev);
    bool half;
} groups[] = {
    {"unary", unary_cases, false},     {"binary", binary_cases, false}, {"reductions", reduce_cases, true},
    {"matmul", matmul_cases, true},    {"softmax", softmax_cases, true}, {"nn", nn_cases, false},
    {"conv", conv_cases, false},       {"fft", fft_cases, false},
    {"movement", movement_cases, true},
    {"norms", channel_norm_cases, false},
};

/* Every device of the plugins built in this tree (opencl:0 here; cuda:0
 * on a machine with a GPU, with or without OpenCL), or of the plugins in
 * DIR with --plugins DIR. Skipped as a whole when no plugin gives a
 * device, unless OAR_REQUIRE_CUDA is set (a GPU machine,
 * scripts/gpu-check.sh) or --plugins is given: then cuda:0 must be there. */
int main(int argc, char **argv) {
    if (argc != 1 && (argc != 3 || strcmp(argv[1], "--plugins"))) {
        fprintf(stderr, "usage: %s [--plugins DIR]\n", argv[0]);
        return 2;
    }
    const char *dir = argc == 3 ? argv[2] : NULL;
#ifdef OAR_PLUGIN_BUILD_DIR
    if (!dir) dir = OAR_PLUGIN_BUILD_DIR;
#endif
    if (!dir) {
        printf("SKIP: no device plugin was built (neither OpenCL nor CUDA found by CMake)\n");
        return TEST_SKIP;
    }
    setenv("OAR_PLUGIN_PATH", dir, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    const char *req = getenv("OAR_REQUIRE_CUDA");
    if ((argc == 3 || (req && *req && strcmp(req, "0"))) && !oar_device_get("cuda:0")) {
        char report[4096];
        oar_device_report(report, sizeof report);
        fprintf(stderr, "%s and there is no cuda:0 (%s)\n%s",
                argc == 3 ? "--plugins wants one" : "OAR_REQUIRE_CUDA is set", oar_last_error(), report);
        return 1;
    }
    if (oar_device_count() <= 1) {
        char report[4096];
        oar_device_report(report, sizeof report);
        printf("SKIP: no plugin device (%s)\n%s", oar_last_error(), report);
        return TEST_SKIP;
    }
    oar_clear_error();
    for (int i = 1; i < oar_device_count(); i++) {
        oar_device *d = oar_device_at(i);
        printf("== %s\n", oar_device_name(d));
        memset(covered, 0, sizeof covered);
        n_run = n_skipped = n_half_run = 0;
        test_current = "conversions";
        conversion_cases(d); /* every pair of bool u8 i32 i64 f16 bf16 f32 f64 */
        static const oar_dtype fds[] = {OAR_F32, OAR_F64, OAR_F16, OAR_BF16};
        for (int f = 0; f < 4; f++) { /* every float group in f32, then in f64; some in f16, bf16 */
            FD = fds[f];
            for (size_t k = 0; k < sizeof groups / sizeof *groups; k++) {
                if (is_half(FD) && !groups[k].half) continue;
                static char name[64];
                snprintf(name, sizeof name, "%s%s%s", groups[k].name, f ? " " : "", f ? oar_dtype_name(FD) : "");
                test_current = name;
                groups[k].run(d);
            }
        }
        test_current = "coverage";
        check_coverage(d);
        test_current = "fused forms";
        fused_forms(d);
    }
    return test_summary();
}

/* How the cuda plugin lays oar's FFT ops out for cuFFT
 * (plugins/cuda/cuda_fft_layout.h), checked on the CPU: for every small
 * shape, every ordered choice of transformed dims, c2c (both directions),
 * r2c and c2r (odd and even lengths), each norm mode, strided and
 * broadcast input views and a strided output view, the layout's pipeline
 * is run with CPU loops for the gather, the zeroing and the scaled
 * scatter, and the cuFFT calls the plugin makes (cufftMakePlanMany64 and
 * the execs with the layout's ranks, sizes, embeds, strides, distances
 * and batches) go to a model of cuFFT (fake_cufft.h: its documented
 * advanced layout, a direct DFT in double, every element it reads or
 * writes inside the scratch, which is malloc'd to the layout's size so
 * ASan sees a read past it). The result must equal a direct DFT of the
 * views written here from the op's definition (for c2r, the CPU's: an
 * inverse transform over the other dims, then along the half dim with the
 * imaginary parts of its first and, for an even length, middle element
 * ignored). Layouts the plugin cannot express must be refused, and only
 * those: more than three transformed dims of extent > 1, or a half dim of
 * extent 1. Skipped (77) where CMake found no CUDA headers. */
#ifdef OAR_TEST_CUDA_HEADERS
#include "test.h"

#include "../../plugins/cuda/cuda_fft_layout.h"
#include "fake_cufft.h"

#define MAXE 4096 /* elements of the largest case */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct {
    int nd;
    int64_t shape[8], st[8], off;
} view;

static int64_t view_at(const view *v, int64_t i) { /* element i, row-major over v's shape */
    int64_t o = v->off;
    for (int d = v->nd - 1; d >= 0; d--) {
        o += (i % v->shape[d]) * v->st[d];
        i /= v->shape[d];
    }
    return o;
}
static int64_t numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}
static int64_t span(const view *v) { /* elements a buffer must hold */
    int64_t m = v->off;
    for (int d = 0; d < v->nd; d++) m += (v->shape[d] - 1) * v->st[d];
    return numel(v->nd, v->shape) ? m + 1 : 1;
}

/* A view of shape s: its dims in a random memory order, padded, at an
 * offset; bcast: dim 0 expanded (stride 0). */
static view random_view(int nd, const int64_t *s, bool bcast) {
    view v = {.nd = nd, .off = (int64_t)(urand() * 3)};
    int order[8];
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = nd - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    int64_t st = 1;
    for (int q = nd - 1; q >= 0; q--) {
        int d = order[q];
        v.shape[d] = s[d];
        v.st[d] = st;
        st *= s[d] + (urand() < 0.3);
    }
    if (bcast) v.st[0] = 0;
    return v;
}

/* ---- the plugin's pipeline with CPU loops and the cuFFT model ---------------- */
/* (the scatter and gather as cuda_kernels.cu's oar_cuda_scaled_copy, pairs of doubles for complex) */
static void copy_perm(double *dst, const view *dv, const double *src, const view *sv, int cx, double s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        for (int p = 0; p < cx; p++) dst[cx * view_at(dv, i) + p] = src[cx * view_at(sv, i) + p] * s;
}
static view permuted(const view *v, const int *perm) {
    view p = {.nd = v->nd, .off = v->off};
    for (int i = 0; i < v->nd; i++) p.shape[i] = v->shape[perm[i]], p.st[i] = v->st[perm[i]];
    return p;
}
static view dense(int nd, const int64_t *shape, const int *perm) {
    view p = {.nd = nd};
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        p.shape[i] = shape[perm[i]];
        p.st[i] = st;
        st *= p.shape[i];
    }
    return p;
}

static int run_plan(const oar_cuda_fft_many *m, void *in, void *out) {
    static const cufftType types[3] = {CUFFT_Z2Z, CUFFT_D2Z, CUFFT_Z2D};
    cufftHandle h;
    size_t ws = 0;
    long long n[3], ie[3], oe[3];
    for (int j = 0; j < 3; j++) n[j] = m->n[j], ie[j] = m->inembed[j], oe[j] = m->onembed[j];
    int rc = cufftCreate(&h) || cufftSetAutoAllocation(h, 0) ||
             cufftMakePlanMany64(h, m->rank, n, ie, m->istride, m->idist, oe, m->ostride, m->odist, types[m->type],
                                 m->batch, &ws);
    void *work = rc ? NULL : malloc(ws);
    if (!rc) rc = cufftSetWorkArea(h, work);
    if (!rc) {
        if (m->type == OAR_CUDA_FFT_C2C) rc = cufftExecZ2Z(h, in, out, m->dir);
        else if (m->type == OAR_CUDA_FFT_R2C) rc = cufftExecD2Z(h, in, out);
        else rc = cufftExecZ2D(h, in, out);
    }
    cufftDestroy(h);
    free(work);
    return rc;
}

/* the plugin's cuda_fft.c, on the CPU: in (view xv, complex unless r2c) -> out (view ov) */
static int pipeline(const oar_cuda_fft_layout *L, int nd, const int64_t *in_shape, const int64_t *out_shape,
                    const double *in, const view *xv, double *out, const view *ov) {
    const int cin = L->kind == OAR_CUDA_FFT_R2C ? 1 : 2, cout = L->kind == OAR_CUDA_FFT_C2R ? 1 : 2;
    double *a = malloc(sizeof(double) * (size_t)(cin * (L->in_numel ? L->in_numel : 1)));
    double *b = L->out_in_place ? NULL : malloc(sizeof(double) * (size_t)(cout * (L->out_numel ? L->out_numel : 1)));
    view xd = dense(nd, in_shape, L->perm), od = dense(nd, out_shape, L->perm);
    view xp = permuted(xv, L->perm), op = permuted(ov, L->perm);
    copy_perm(a, &xd, in, &xp, cin, 1.0, L->in_numel);
    int rc = 0;
    for (int p = 0; p < L->n_plans && !rc; p++) {
        const oar_cuda_fft_many *m = &L->plan[p];
        if (m->type == OAR_CUDA_FFT_C2R)
            for (int z = 0; z < L->n_zero; z++)
                for (int64_t j = 0; j < L->zero_count; j++) a[2 * (L->zero_off[z] + j * L->zero_stride) + 1] = 0;
        rc = run_plan(m, a, m->type == OAR_CUDA_FFT_C2C ? a : b);
    }
    if (!rc) copy_perm(out, &op, L->out_in_place ? a : b, &od, cout, L->scale, L->out_numel);
    free(a);
    free(b);
    return rc;
}

/* ---- the definitions ------------------------------------------------------------ */
/* A direct DFT of the complex array v (dense, shape s, nd dims) along dim d,
 * sign sg (-1 forward), in place. */
static void dft_dim(double *v, int nd, const int64_t *s, int d, int sg) {
    int64_t inner = 1, outer = 1, n = s[d];
    for (int i = d + 1; i < nd; i++) inner *= s[i];
    for (int i = 0; i < d; i++) outer *= s[i];
    double *line = malloc(sizeof(double) * 2 * (size_t)n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            double *base = v + 2 * (o * n * inner + q);
            for (int64_t k = 0; k < n; k++) {
                double sr = 0, si = 0;
                for (int64_t x = 0; x < n; x++) {
                    double ph = 2 * 3.14159265358979323846 * (double)(k * x % n) / (double)n;
                    double c = cos(ph), sn = sg * sin(ph), vr = base[2 * x * inner], vi = base[2 * x * inner + 1];
                    sr += vr * c - vi * sn;
                    si += vr * sn + vi * c;
                }
                line[2 * k] = sr, line[2 * k + 1] = si;
            }
            for (int64_t k = 0; k < n; k++) base[2 * k * inner] = line[2 * k], base[2 * k * inner + 1] = line[2 * k + 1];
        }
    free(line);
}

/* The op's result, dense in out_shape (complex pairs unless c2r). */
static void reference(int kind, int nd, const int64_t *in_shape, const int64_t *out_shape, int k, const int64_t *dims,
                      int forward, int norm, const double *in, const view *xv, double *ref) {
    const int cin = kind == OAR_CUDA_FFT_R2C ? 1 : 2;
    const int h = (int)dims[k - 1];
    int64_t nin = numel(nd, in_shape);
    /* a dense complex copy of the input, padded out to the full length along h for c2r */
    int64_t full[8];
    memcpy(full, in_shape, sizeof full);
    if (kind == OAR_CUDA_FFT_C2R) full[h] = out_shape[h];
    int64_t nfull = numel(nd, full);
    double *v = calloc((size_t)(2 * nfull), sizeof(double));
    view fv = {.nd = nd};
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) fv.shape[i] = in_shape[i], fv.st[i] = st, st *= full[i];
    for (int64_t i = 0; i < nin; i++) {
        int64_t s = view_at(xv, i), d = view_at(&fv, i);
        v[2 * d] = in[cin * s];
        v[2 * d + 1] = cin == 2 ? in[cin * s + 1] : 0;
    }
    double N = 1;
    const int64_t *sig = kind == OAR_CUDA_FFT_R2C ? in_shape : out_shape;
    for (int j = 0; j < k; j++) N *= (double)sig[dims[j]];
    double scale = norm == 1 ? 1 / sqrt(N) : norm == 2 ? 1 / N : 1;
    if (kind == OAR_CUDA_FFT_C2R) {
        for (int j = 0; j < k - 1; j++) dft_dim(v, nd, full, (int)dims[j], 1);
        /* along h: imaginary parts of element 0 (and n/2) ignored, the rest the conjugate mirror */
        int64_t n = full[h], H = in_shape[h], inner = 1;
        for (int i = h + 1; i < nd; i++) inner *= full[i];
        for (int64_t i = 0; i < nfull; i++) {
            int64_t x = (i / inner) % n;
            if (x == 0 || (n % 2 == 0 && x == n / 2)) v[2 * i + 1] = 0;
            if (x >= H) v[2 * i] = v[2 * (i + (n - 2 * x) * inner)], v[2 * i + 1] = -v[2 * (i + (n - 2 * x) * inner) + 1];
        }
        dft_dim(v, nd, full, h, 1);
        for (int64_t i = 0; i < nfull; i++) ref[i] = v[2 * i] * scale;
    } else {
        for (int j = 0; j < k; j++) dft_dim(v, nd, full, (int)dims[j], kind == OAR_CUDA_FFT_C2C && !forward ? 1 : -1);
        view ov = {.nd = nd};
        st = 1;
        for (int i = nd - 1; i >= 0; i--) ov.shape[i] = out_shape[i], ov.st[i] = st, st *= full[i];
        int64_t nout = numel(nd, out_shape);
        for (int64_t i = 0; i < nout; i++) {
            int64_t s = view_at(&ov, i);
            ref[2 * i] = v[2 * s] * scale, ref[2 * i + 1] = v[2 * s + 1] * scale;
        }
    }
    free(v);
}

static int n_cases, n_accepted, n_refused;

/* One case: the layout accepted exactly when it should be, and its
 * pipeline's result equal to the definition's. */
static void check_case(int kind, int nd, const int64_t *in_shape, int k, const int64_t *dims, int forward, int norm,
                       int64_t n_half) {
    int64_t out_shape[8];
    memcpy(out_shape, in_shape, sizeof out_shape);
    const int h = (int)dims[k - 1];
    if (kind == OAR_CUDA_FFT_R2C) out_shape[h] = in_shape[h] / 2 + 1;
    if (kind == OAR_CUDA_FFT_C2R) out_shape[h] = n_half;
    int big = 0;
    for (int j = 0; j < k; j++) {
        int d = (int)dims[j];
        if (kind != OAR_CUDA_FFT_C2C && d == h) continue;
        big += in_shape[d] > 1;
    }
    const int64_t nsig = kind == OAR_CUDA_FFT_R2C ? in_shape[h] : out_shape[h];
    const bool expect = big + (kind != OAR_CUDA_FFT_C2C) <= 3 && (kind == OAR_CUDA_FFT_C2C || nsig > 1);
    oar_cuda_fft_layout L;
    bool ok = oar_cuda_fft_layout_make(kind, nd, in_shape, out_shape, k, dims, forward, norm, &L);
    n_cases++;
    if (ok != expect) {
        fprintf(stderr, "kind %d, rank %d, k %d (first dim %lld): layout %s, expected %s\n", kind, nd, k,
                (long long)dims[0], ok ? "accepted" : "refused", expect ? "accepted" : "refused");
        CHECK(0);
        return;
    }
    if (!ok) {
        n_refused++;
        return;
    }
    n_accepted++;
    const int cin = kind == OAR_CUDA_FFT_R2C ? 1 : 2, cout = kind == OAR_CUDA_FFT_C2R ? 1 : 2;
    view xv = random_view(nd, in_shape, in_shape[0] > 1 && urand() < 0.2);
    view ov = random_view(nd, out_shape, false);
    int64_t xs = span(&xv), os = span(&ov), nout = numel(nd, out_shape);
    double *x = malloc(sizeof(double) * (size_t)(cin * xs));
    double *o = malloc(sizeof(double) * (size_t)(cout * os));
    double *ref = malloc(sizeof(double) * (size_t)(cout * (nout ? nout : 1)));
    for (int64_t i = 0; i < cin * xs; i++) x[i] = 2 * urand() - 1;
    for (int64_t i = 0; i < cout * os; i++) o[i] = NAN;
    CHECK(pipeline(&L, nd, in_shape, out_shape, x, &xv, o, &ov) == 0);
    reference(kind, nd, in_shape, out_shape, k, dims, forward, norm, x, &xv, ref);
    double worst = 0;
    for (int64_t i = 0; i < nout; i++)
        for (int p = 0; p < cout; p++) {
            double got = o[cout * view_at(&ov, i) + p], want = ref[cout * i + p];
            double e = fabs(got - want) / (1 + fabs(want));
            if (!(e <= worst)) worst = e;
        }
    if (!(worst < 1e-9)) {
        fprintf(stderr, "kind %d, rank %d, shape [%lld %lld %lld %lld], k %d, dims %lld %lld %lld %lld, fwd %d, "
                        "norm %d: error %g\n", kind, nd, (long long)in_shape[0], (long long)(nd > 1 ? in_shape[1] : 0),
                (long long)(nd > 2 ? in_shape[2] : 0), (long long)(nd > 3 ? in_shape[3] : 0), k, (long long)dims[0],
                (long long)(k > 1 ? dims[1] : -1), (long long)(k > 2 ? dims[2] : -1), (long long)(k > 3 ? dims[3] : -1),
                forward, norm, worst);
        CHECK(0);
    }
    free(x);
    free(o);
    free(ref);
}

/* Every ordered choice of dims (up to 4) of random shapes of rank 1..4. */
static void test_exhaustive(void) {
    static const int64_t extents[] = {1, 2, 3, 4, 5, 6};
    for (int nd = 1; nd <= 4; nd++)
        for (int rep = 0; rep < (nd < 3 ? 10 : 6); rep++) {
            int64_t shape[8] = {0};
            for (int i = 0; i < nd; i++) shape[i] = extents[(int)(urand() * 6)];
            if (nd == 4 && rep == 0)
                for (int i = 0; i < 4; i++) shape[i] = 2 + i % 2; /* four dims of extent > 1 */
            if (numel(nd, shape) > 400) shape[0] = 1;
            /* every ordered subset: the subset by mask, its order by a random shuffle */
            for (int mask = 1; mask < (1 << nd); mask++) {
                int64_t dims[8];
                int k = 0;
                for (int i = 0; i < nd; i++)
                    if ((mask >> i) & 1) dims[k++] = i;
                for (int i = k - 1; i > 0; i--) {
                    int j = (int)(urand() * (i + 1));
                    int64_t t = dims[i];
                    dims[i] = dims[j], dims[j] = t;
                }
                int norm = (int)(urand() * 3), fwd = urand() < 0.5;
                check_case(OAR_CUDA_FFT_C2C, nd, shape, k, dims, fwd, norm, 0);
                check_case(OAR_CUDA_FFT_R2C, nd, shape, k, dims, 1, norm, 0);
                /* c2r: the input's half dim holds n/2 + 1 of an odd or even n */
                int h = (int)dims[k - 1];
                for (int odd = 0; odd < 2; odd++) {
                    int64_t n = 2 * (shape[h] - 1) + odd;
                    if (n < 1) continue;
                    check_case(OAR_CUDA_FFT_C2R, nd, shape, k, dims, 0, (norm + odd) % 3, n);
                }
            }
        }
    printf("%d cases: %d laid out and run against the definition, %d refused\n", n_cases, n_accepted, n_refused);
    CHECK(n_accepted > 500 && n_refused > 40);
}

/* Named layouts, and what is refused. */
static void test_named(void) {
    oar_cuda_fft_layout L;
    /* c2r over dims (0, 1) of [4, 5] into [4, 8]: the half dim first; an
     * inverse C2C over dim 0 (batch 5), the imaginary parts of rows 0 and
     * 4 zeroed, a C2R of 8 with stride and batch 4 */
    CHECK(oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2R, 2, (int64_t[]){4, 5}, (int64_t[]){4, 8}, 2, (int64_t[]){0, 1}, 0,
                                   2, &L));
    CHECK(L.perm[0] == 1 && L.perm[1] == 0 && L.n_plans == 2 && L.n_zero == 2 && L.scale == 1.0 / 32);
    CHECK(L.plan[0].type == OAR_CUDA_FFT_C2C && L.plan[0].rank == 1 && L.plan[0].n[0] == 4 && L.plan[0].batch == 5 &&
          L.plan[0].dir == 1);
    CHECK(L.plan[1].type == OAR_CUDA_FFT_C2R && L.plan[1].n[0] == 8 && L.plan[1].istride == 4 &&
          L.plan[1].idist == 1 && L.plan[1].batch == 4 && L.zero_off[1] == 4 * 4 && L.zero_count == 4);
    /* r2c of the last dim of [3, 10]: one R2C, batch 3, distances 10 and 6 */
    CHECK(oar_cuda_fft_layout_make(OAR_CUDA_FFT_R2C, 2, (int64_t[]){3, 10}, (int64_t[]){3, 6}, 1, (int64_t[]){1}, 1, 0,
                                   &L));
    CHECK(L.n_plans == 1 && L.plan[0].idist == 10 && L.plan[0].odist == 6 && L.plan[0].batch == 3 && L.scale == 1);
    /* c2c over extent-1 dims only: a scaled copy */
    CHECK(oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 2, (int64_t[]){1, 7}, (int64_t[]){1, 7}, 1, (int64_t[]){0}, 1, 1,
                                   &L));
    CHECK(L.n_plans == 0 && L.scale == 1);
    /* refused: a repeated dim, a dim out of range, an output of the wrong shape, no dims, a bad norm */
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 2, (int64_t[]){3, 4}, (int64_t[]){3, 4}, 2, (int64_t[]){1, 1}, 1,
                                    0, &L));
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 2, (int64_t[]){3, 4}, (int64_t[]){3, 4}, 1, (int64_t[]){2}, 1, 0,
                                    &L));
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_R2C, 2, (int64_t[]){3, 4}, (int64_t[]){3, 4}, 1, (int64_t[]){1}, 1, 0,
                                    &L));
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2R, 1, (int64_t[]){5}, (int64_t[]){10}, 1, (int64_t[]){0}, 0, 0, &L));
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 1, (int64_t[]){5}, (int64_t[]){5}, 0, (int64_t[]){0}, 1, 0, &L));
    CHECK(!oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 1, (int64_t[]){5}, (int64_t[]){5}, 1, (int64_t[]){0}, 1, 3, &L));
    /* an empty batch: accepted, nothing to run */
    CHECK(oar_cuda_fft_layout_make(OAR_CUDA_FFT_C2C, 2, (int64_t[]){0, 4}, (int64_t[]){0, 4}, 1, (int64_t[]){1}, 1, 0,
                                   &L));
    CHECK(L.in_numel == 0 && L.n_plans == 0);
    /* the model of cuFFT itself: a C2R of a half whose first element is not real fails */
    double half[6] = {1, 0.5, 2, 0, 3, 0};
    double outr[4];
    oar_cuda_fft_many m = {.type = OAR_CUDA_FFT_C2R, .rank = 1, .n = {4}, .inembed = {3}, .onembed = {4},
                           .istride = 1, .ostride = 1, .idist = 3, .odist = 4, .batch = 1};
    CHECK(run_plan(&m, half, outr) == CUFFT_EXEC_FAILED);
    half[1] = 0;
    CHECK(run_plan(&m, half, outr) == 0);
    CHECK(fabs(outr[0] - (1 + 2 * 2 + 3)) < 1e-12 && fabs(outr[1] - (1 - 3)) < 1e-12);
    CHECK(fake_cufft_live == 0);
}

int main(void) {
    RUN(test_named);
    RUN(test_exhaustive);
    return test_summary();
}
#else
#include <stdio.h>
int main(void) {
    printf("SKIP: no CUDA headers (CMake found no CUDA toolkit)\n");
    return 77;
}
#endif

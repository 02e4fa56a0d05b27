/* Calibration: oar's own kernels and the MPI all-reduce measured on this
 * machine, and the calibration file (JSON) that `oar plan --calibrate`
 * writes (docs/internals/plan.md, "Calibration"). */
#include "plan.h"
#include "../core/save.h"
#include "../io/json.h"

#include <oar/autograd.h>
#include <oar/dist.h>
#include <oar/ops.h>
#include <oar/optim.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per call of fn(ctx) (0 or a failure status): calls repeated
 * for at least 60 ms (after one warm-up call), total time over calls. A
 * span as long as a training step's, not single calls, so that on a
 * machine shared with other processes the rate carries the share of the
 * cores a step gets: a call of 100 us mostly runs inside one time slice
 * and would look uncontended, and a median would drop the slices lost.
 * < 0 on failure. Local: ranks may make different numbers of calls. */
static double time_windows(int (*fn)(void *ctx), void *ctx) {
    if (fn(ctx)) return -1;
    double t0 = now(), dt;
    int calls = 0;
    do {
        if (fn(ctx)) return -1;
        calls++;
    } while ((dt = now() - t0) < 0.06);
    return dt / calls;
}

typedef struct op_call {
    oar_tensor *(*op)(oar_tensor *, oar_tensor *);
    oar_tensor *a, *b;
} op_call;

static int run_op(void *ctx) {
    op_call *c = ctx;
    oar_tensor *y = c->op(c->a, c->b);
    if (!y) return oari_fail_status();
    oar_tensor_release(y);
    return 0;
}

/* Seconds per call of op(a, b), the result released at once. */
static double time_op(oar_tensor *(*op)(oar_tensor *, oar_tensor *), oar_tensor *a, oar_tensor *b) {
    op_call c = {op, a, b};
    return time_windows(run_op, &c);
}

/* One all-reduce of n floats over the world mesh, timed. Back to back
 * (phase false): the median of reps, the message's own latency and
 * bandwidth. After a compute phase (phase true) of the same work on every
 * rank (8 GEMMs of 256^3, a few ms: a step's compute between two
 * synchronisations): the mean of reps, which includes waiting for the
 * slowest rank, as the ranks drift apart on a machine shared with other
 * processes (on an idle one, little more than the message). < 0 on
 * failure. */
#define SYNC_PHASE_DIM 256
#define SYNC_PHASE_GEMMS 8
#define SYNC_PHASE_FLOPS (SYNC_PHASE_GEMMS * 2.0 * SYNC_PHASE_DIM * SYNC_PHASE_DIM * SYNC_PHASE_DIM)
static double time_allreduce(oar_mesh *mesh, int64_t n, int reps, bool phase, double *phase_time) {
    const int64_t sq[2] = {SYNC_PHASE_DIM, SYNC_PHASE_DIM};
    double t[16];
    if (reps > 16) reps = 16;
    oar_tensor *local = oar_ones(OAR_F32, 1, &n), *a = phase ? oar_randn(OAR_F32, 2, sq) : NULL;
    oar_placement part = oar_partial(OAR_REDUCE_SUM), rep = oar_replicate();
    double res = -1;
    int got = 0;
    for (int i = -1; local && (a || !phase) && i < reps; i++) { /* i = -1: warm-up */
        double tp0 = now();
        oar_pool *p = phase ? oar_pool_push() : NULL;
        bool ok = !phase || p;
        for (int k = 0; phase && k < SYNC_PHASE_GEMMS && ok; k++) ok = oar_matmul(a, a) != NULL;
        if (p) oar_pool_pop(p);
        if (phase_time && i >= 0) *phase_time += (now() - tp0) / reps;
        oar_tensor *d = ok ? oar_dtensor_from_local(local, mesh, &part, &n) : NULL;
        if (!d) break;
        double t0 = now();
        oar_tensor *r = oar_reshard(d, mesh, &rep);
        double dt = now() - t0;
        oar_tensor_release(d);
        if (!r) break;
        oar_tensor_release(r);
        if (i >= 0) t[got++] = dt;
    }
    if (got == reps) {
        qsort(t, (size_t)reps, sizeof *t, cmp_d);
        res = t[reps / 2];
        if (phase) {
            res = 0;
            for (int i = 0; i < reps; i++) res += t[i] / reps;
        }
    }
    oar_tensor_release(local);
    oar_tensor_release(a);
    return res;
}

/* Seconds per forward op of a training step, dispatch, autograd, freeing
 * the temporaries and (on a mesh) the dist hook included: a tiny two-layer
 * step, 5 forward ops, its backward counted as two forwards (the cost
 * model's three passes), timed over 400 steps (a fixed count, so that ranks
 * on a mesh make the same calls; the mean, so that a machine shared with
 * other processes shows as in a step). < 0 on failure. */
static double time_step_overhead(oar_mesh *mesh, int world) {
    const int64_t xs[2] = {2 * (int64_t)world, 8}, ws[2] = {8, 8};
    enum { REPS = 400 };
    double res = -1, t0 = 0;
    int got = 0;
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    oar_tensor *x = oar_ones(OAR_F32, 2, xs), *w1 = oar_ones(OAR_F32, 2, ws), *w2 = oar_ones(OAR_F32, 2, ws);
    if (mesh) {
        oar_placement sh = oar_shard(0), rep = oar_replicate();
        x = x ? oar_shard_tensor(x, mesh, &sh) : NULL;
        w1 = w1 ? oar_shard_tensor(w1, mesh, &rep) : NULL;
        w2 = w2 ? oar_shard_tensor(w2, mesh, &rep) : NULL;
    }
    if (x && w1 && w2 && !oar_tensor_set_requires_grad(w1, true) && !oar_tensor_set_requires_grad(w2, true))
        for (int i = -1; i < REPS; i++) { /* i = -1: warm-up */
            if (i == 0) t0 = now();
            oar_pool *p = oar_pool_push();
            oar_tensor *y = oar_matmul(oar_relu(oar_matmul(x, w1)), w2);
            int st = oar_backward(oar_sum(oar_square(y), 0, NULL, false), NULL);
            oar_pool_pop(p); /* a step frees its temporaries: part of each op's cost */
            if (st) break;
            if (i >= 0) got++;
        }
    if (got == REPS) res = (now() - t0) / REPS / (3.0 * 5);
    oar_pool_pop(pool);
    return res;
}

/* From 2 rows: a GEMM of 2 rows still reads its whole weight, and takes nearly as long as one of
 * 4 (a table clamped at 4 priced micro-batches of 2 rows at twice their speed) */
const double oar_plan_gemm_dims[OAR_PLAN_GEMM_CLASSES] = {2, 4, 8, 16, 32, 64, 128, 256, 512};

/* The three GEMMs of a linear layer's training step, as the matmul
 * gradient rule makes them (src/ops/linalg.c): y = x W^T, dx = g W,
 * dW = (g^T x)^T stored transposed; x and g [s, w], W [w, w]. */
typedef struct gemm_triple {
    oar_tensor *x, *g, *W;
} gemm_triple;

static int run_gemm_triple(void *ctx) {
    gemm_triple *c = ctx;
    oar_pool *p = oar_pool_push();
    if (!p) return oari_fail_status();
    oar_tensor *y = oar_matmul(c->x, oar_transpose(c->W, 0, 1));
    oar_tensor *dx = oar_matmul(c->g, c->W);
    oar_tensor *dw = oar_matmul(oar_transpose(c->g, 0, 1), c->x);
    oar_pool_pop(p);
    return y && dx && dw ? 0 : oari_fail_status();
}

/* Seconds per triple at rows s and width w; < 0 on failure. */
static double time_gemm_triple(int64_t s, int64_t w) {
    const int64_t xs[2] = {s, w}, ws[2] = {w, w};
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    gemm_triple c = {oar_randn(OAR_F32, 2, xs), oar_randn(OAR_F32, 2, xs), oar_randn(OAR_F32, 2, ws)};
    double res = c.x && c.g && c.W ? time_windows(run_gemm_triple, &c) : -1;
    oar_pool_pop(pool);
    return res;
}

/* An op family's representative (oar_plan_op_family), forward and backward as a training
 * step runs them: x (and layer_norm's weight and bias) require grad; g is the output's
 * gradient. */
typedef struct family_call {
    int fam;
    oar_tensor *x, *w, *b, *mask, *zero, *g;
} family_call;

static int run_family(void *ctx) {
    family_call *c = ctx;
    oar_pool *p = oar_pool_push();
    if (!p) return oari_fail_status();
    oar_tensor *y = c->fam == OAR_PLAN_FAMILY_TRANSCENDENTAL ? oar_gelu(c->x, false)
                  : c->fam == OAR_PLAN_FAMILY_NORM          ? oar_layer_norm(c->x, 1, c->w, c->b, 1e-5)
                  : c->fam == OAR_PLAN_FAMILY_SOFTMAX       ? oar_softmax(c->x, 1)
                                                            : oar_where(c->mask, c->x, c->zero);
    oar_tensor *in[3] = {c->x, c->w, c->b}, *gr[3];
    int st = y ? oar_grad(1, &y, &c->g, c->fam == OAR_PLAN_FAMILY_NORM ? 3 : 1, in, false, false, gr)
               : oari_fail_status();
    oar_pool_pop(p);
    return st;
}

/* Bytes per second of family fam's forward bytes (inputs that are not parameters, and
 * outputs: as oar_plan_model_from_graph counts them), its backward counted as two forwards:
 * 3 x bytes / (forward + backward seconds), at 2^18 f32 elements. < 0 on failure. */
static double time_family(int fam) {
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    const int64_t n = 1 << 18, flat[1] = {n}, ln[2] = {2048, 128}, sm[2] = {4096, 64}, cube[3] = {64, 64, 64},
                  sq[2] = {64, 64}, feat = 128;
    family_call c = {.fam = fam};
    double bytes = 2.0 * 4 * (double)n; /* x in, y out */
    if (fam == OAR_PLAN_FAMILY_TRANSCENDENTAL) c.x = oar_randn(OAR_F32, 1, flat);
    else if (fam == OAR_PLAN_FAMILY_NORM) {
        c.x = oar_randn(OAR_F32, 2, ln), c.w = oar_ones(OAR_F32, 1, &feat), c.b = oar_zeros(OAR_F32, 1, &feat);
        bytes += 2.0 * 4 * 2048; /* mean, rstd */
        if (c.w && c.b && (oar_tensor_set_requires_grad(c.w, true) || oar_tensor_set_requires_grad(c.b, true)))
            c.w = NULL;
    } else if (fam == OAR_PLAN_FAMILY_SOFTMAX) c.x = oar_randn(OAR_F32, 2, sm);
    else {
        c.x = oar_randn(OAR_F32, 3, cube), c.zero = oar_full(OAR_F32, 0, NULL, -1e9);
        oar_tensor *r = oar_randn(OAR_F32, 2, sq), *z = oar_zeros(OAR_F32, 2, sq);
        c.mask = r && z ? oar_gt(r, z) : NULL;
        bytes += 64.0 * 64 + 4; /* the mask, the scalar */
    }
    bool ok = c.x && (fam != OAR_PLAN_FAMILY_NORM || (c.w && c.b)) &&
              (fam != OAR_PLAN_FAMILY_SELECT || (c.zero && c.mask)) && !oar_tensor_set_requires_grad(c.x, true);
    if (ok) {
        c.g = oar_randn(OAR_F32, oar_tensor_ndim(c.x), oar_tensor_shape(c.x));
        ok = c.g != NULL;
    }
    double t = ok ? time_windows(run_family, &c) : -1;
    oar_pool_pop(pool);
    return t > 0 ? 3 * bytes / t : -1;
}

static int run_optim_step(void *ctx) { return oar_optim_step(ctx); }

/* Seconds per parameter element of one Adam step (oar_optim_step) over a
 * parameter of n elements with a dense gradient: 2^18 (4 MiB of p, g, m, v:
 * in the cache, 4 ranks at once), or a multiple of the cache for the cold
 * rate. < 0 on failure. */
static double time_adam_per_elem(int64_t n) {
    double res = -1;
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    oar_tensor *p = oar_randn(OAR_F32, 1, &n), *c = oar_randn(OAR_F32, 1, &n);
    oar_optimizer *opt = NULL;
    if (p && c && !oar_tensor_set_requires_grad(p, true) && !oar_backward(oar_sum(oar_mul(p, c), 0, NULL, false), NULL))
        opt = oar_adam_new(1, &p, &(oar_adam_options){.lr = 1e-6});
    if (opt) res = time_windows(run_optim_step, opt) / (double)n;
    oar_optim_free(opt);
    oar_pool_pop(pool);
    return res;
}

/* ---- memory past the cache ------------------------------------------------ */

/* The last-level cache's size in bytes as the OS reports it (Linux's sysfs: the highest cache
 * level of cpu0), 0 when unknown. Not sysconf(_SC_LEVEL3_CACHE_SIZE): under a hypervisor glibc
 * can report the host's whole L3 (320 MiB for this VM's 32 MiB). */
static double llc_bytes(void) {
    double best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int level = fgets(buf, sizeof buf, f) ? atoi(buf) : 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) continue;
        char *end = NULL;
        double size = fgets(buf, sizeof buf, f) ? strtod(buf, &end) : 0;
        fclose(f);
        if (end && (*end == 'K' || *end == 'k')) size *= 1024;
        else if (end && (*end == 'M' || *end == 'm')) size *= 1024 * 1024;
        if (level > best_level && size > 0) best_level = level, best = size;
    }
    return best;
}

#define COLD_MAX_BYTES (128.0 * 1024 * 1024) /* larger caches: not modelled (the rotation's memory) */
enum { COLD_ROTATION = 64 }; /* at most this many operand sets rotate (2 x 128 MiB in 4 MiB ones) */

typedef struct cold_add {
    oar_tensor **a, **b;
    int n, at;
} cold_add;

static int run_cold_add(void *ctx) {
    cold_add *c = ctx;
    int i = c->at++ % c->n;
    oar_pool *p = oar_pool_push(); /* (the caller's pool owns the operands: the sum is this one's) */
    if (!p) return oari_fail_status();
    oar_tensor *y = oar_add(c->a[i], c->b[i]);
    oar_pool_pop(p);
    return y ? 0 : oari_fail_status();
}

/* Bytes/s of an add of 2^20 f32 elements whose operands rotate through pairs of twice `cache`
 * bytes in all, so that each call reads them from memory. < 0 on failure. */
static double time_cold_add(double cache) {
    const int64_t n = 1 << 20;
    int pairs = (int)ceil(2 * cache / (8.0 * (double)n));
    if (pairs < 2) pairs = 2;
    if (pairs > COLD_ROTATION) pairs = COLD_ROTATION;
    oar_tensor *a[COLD_ROTATION] = {0}, *b[COLD_ROTATION] = {0};
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    bool ok = true;
    for (int i = 0; i < pairs && ok; i++) ok = (a[i] = oar_randn(OAR_F32, 1, &n)) && (b[i] = oar_randn(OAR_F32, 1, &n));
    cold_add c = {a, b, pairs, 0};
    double t = ok ? time_windows(run_cold_add, &c) : -1;
    oar_pool_pop(pool);
    return t > 0 ? 3.0 * 4 * (double)n / t : -1;
}

typedef struct cold_triple {
    gemm_triple *g;
    int n, at;
} cold_triple;

static int run_cold_triple(void *ctx) {
    cold_triple *c = ctx;
    return run_gemm_triple(&c->g[c->at++ % c->n]);
}

/* Seconds per triple at rows s and width 1024 (the wide table), each call's weight the next of
 * a rotation of twice `cache` bytes in all. < 0 on failure. */
static double time_cold_triple(int64_t s, oar_tensor *const *weights, int nw) {
    const int64_t w = 1024, xs[2] = {s, w};
    oar_pool *pool = oar_pool_push();
    if (!pool) return -1;
    gemm_triple g[COLD_ROTATION];
    oar_tensor *x = oar_randn(OAR_F32, 2, xs), *gr = oar_randn(OAR_F32, 2, xs);
    for (int i = 0; i < nw; i++) g[i] = (gemm_triple){x, gr, weights[i]};
    cold_triple c = {g, nw, 0};
    double res = x && gr ? time_windows(run_cold_triple, &c) : -1;
    oar_pool_pop(pool);
    return res;
}

/* Fills out's cold figures (cache_bytes: the effective cache of the node, ew_bw_cold,
 * optim_time_cold, gemm_rate_cold); leaves them 0 where the OS reports no cache or one past
 * COLD_MAX_BYTES. 0 or a status. */
static int calibrate_cold(oar_plan_calib *out) {
    double cache = llc_bytes();
    if (!(cache > 0) || cache > COLD_MAX_BYTES) return 0;
    double add = time_cold_add(cache);
    if (add <= 0) return oari_fail_status();
    /* Adam's p, g, m, v: 16 bytes an element, twice the cache a rank */
    double adam = time_adam_per_elem((int64_t)ceil(2 * cache / 16));
    if (adam <= 0) return oari_fail_status();
    /* the effective cache: what the ranks of this machine hold between two passes is less than
     * the size the OS reports (other tenants of the same cache under a hypervisor, a victim
     * cache's replacement, the step's other data: here Adam ran at the cold rate with 25 MB of
     * state a node, under the 32 MiB L3). So Adam again at node working sets of 1/8 .. 2 of the
     * cache (every rank at once, each 1/world of it): the set at which its time per element is
     * halfway from the smallest set's to the cold one's, linear in log set between the points */
    int world = oar_dist_world_size();
    if (world < 1) world = 1;
    enum { SWEEP = 5 };
    const double frac[SWEEP] = {0.125, 0.25, 0.5, 1, 2};
    double t[SWEEP], eff = 2 * cache;
    for (int i = 0; i < SWEEP; i++) {
        int64_t n = (int64_t)ceil(frac[i] * cache / (16.0 * world));
        if ((t[i] = time_adam_per_elem(n < 1024 ? 1024 : n)) <= 0) return oari_fail_status();
    }
    double half = 0.5 * (t[0] + adam);
    for (int i = 0; i < SWEEP; i++) {
        if (t[i] < half) continue;
        if (i == 0) eff = frac[0] * cache;
        else {
            double w = (half - t[i - 1]) / (t[i] - t[i - 1]);
            eff = cache * exp(log(frac[i - 1]) + w * (log(frac[i]) - log(frac[i - 1])));
        }
        break;
    }
    const int64_t ws[2] = {1024, 1024};
    int nw = (int)ceil(2 * cache / (4.0 * 1024 * 1024));
    if (nw < 2) nw = 2;
    if (nw > COLD_ROTATION) nw = COLD_ROTATION;
    oar_tensor *w[COLD_ROTATION] = {0};
    oar_pool *pool = oar_pool_push();
    if (!pool) return oari_fail_status();
    int st = 0;
    for (int i = 0; i < nw && !st; i++)
        if (!(w[i] = oar_randn(OAR_F32, 2, ws))) st = oari_fail_status();
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES && !st; i++) {
        int64_t d = (int64_t)oar_plan_gemm_dims[i];
        double t = time_cold_triple(d, w, nw);
        if (t <= 0) st = oari_fail_status();
        else out->gemm_rate_cold[i] = 3 * 2.0 * (double)d * OAR_PLAN_GEMM_WEIGHT_WIDE / t;
    }
    oar_pool_pop(pool);
    if (st) return st;
    out->cache_bytes = eff, out->ew_bw_cold = add, out->optim_time_cold = adam;
    return 0;
}

int oar_plan_calibrate(oar_plan_calib *out) {
    if (!out) return oari_null_arg("oar_plan_calibrate", "out");
    memset(out, 0, sizeof *out);
    out->ranks = 1;
    int st = 0;
    /* GEMM: 384 x 384 x 384 f32 */
    const int64_t n = 384, sq[2] = {n, n}, big = 1 << 20, tiny = 1;
    oar_tensor *a = oar_randn(OAR_F32, 2, sq), *b = oar_randn(OAR_F32, 2, sq);
    oar_tensor *x = oar_randn(OAR_F32, 1, &big), *y = oar_randn(OAR_F32, 1, &big);
    oar_tensor *s = oar_ones(OAR_F32, 1, &tiny), *u = oar_ones(OAR_F32, 1, &tiny);
    if (!a || !b || !x || !y || !s || !u) st = oari_fail_status();
    double tm = st ? -1 : time_op(oar_matmul, a, b);
    double te = st ? -1 : time_op(oar_add, x, y);
    double to = st ? -1 : time_op(oar_add, s, u);
    oar_tensor *ts[] = {a, b, x, y, s, u};
    for (int i = 0; i < 6; i++) oar_tensor_release(ts[i]);
    if (st) return st;
    if (tm <= 0 || te <= 0 || to <= 0) return oari_fail_status();
    out->op_overhead = to;
    out->matmul_flops = 2.0 * (double)(n * n * n) / fmax(tm - to, 1e-9);
    out->ew_bw = 3.0 * 4.0 * (double)big / fmax(te - to, 1e-9); /* two reads, one write */
    double tstep = time_step_overhead(NULL, 1);
    if (tstep <= 0) return oari_fail_status();
    if (tstep > out->op_overhead) out->op_overhead = tstep;
    /* GEMM rates by smallest dimension, and Adam's step per element */
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) {
        int64_t d = (int64_t)oar_plan_gemm_dims[i];
        double tg = time_gemm_triple(d, 512), tw = time_gemm_triple(d, 1024);
        if (tg <= 0 || tw <= 0) return oari_fail_status();
        out->gemm_rate[i] = 3 * 2.0 * (double)d * OAR_PLAN_GEMM_WEIGHT / tg;
        out->gemm_rate_wide[i] = 3 * 2.0 * (double)d * OAR_PLAN_GEMM_WEIGHT_WIDE / tw;
    }
    out->optim_time = time_adam_per_elem(1 << 18);
    if (out->optim_time <= 0) return oari_fail_status();
    if ((st = calibrate_cold(out))) return st;
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++)
        if ((out->family_bw[i] = time_family(i)) <= 0) return oari_fail_status();
    /* MPI all-reduce at several sizes: least squares t = a0 + bytes * b0 */
    int world = oar_dist_world_size();
    if (world > 1) {
        int64_t shape = world;
        oar_mesh *mesh = oar_mesh_create(1, &shape, NULL, NULL);
        if (!mesh) return oari_fail_status();
        static const int64_t sizes[] = {1024, 16384, 131072, 524288};
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        double t_small = 0;
        for (int i = 0; i < 4 && !st; i++) {
            double t = time_allreduce(mesh, sizes[i], 7, false, NULL);
            if (i == 0) t_small = t;
            if (t < 0) st = oari_fail_status();
            double bytes = 4.0 * (double)sizes[i];
            sx += bytes, sy += t, sxx += bytes * bytes, sxy += bytes * t;
        }
        double b0 = (4 * sxy - sx * sy) / (4 * sxx - sx * sx), a0 = (sy - b0 * sx) / 4;
        if (a0 < 0) a0 = 0;
        if (b0 <= 0) b0 = 1e-12;
        /* the wait for the slowest rank at a synchronisation after compute: what a phase and
         * its all-reduce take beyond the cost model's price of the phase (its GEMMs at the
         * rate measured above, on every rank at once) and a back-to-back all-reduce. Not
         * beyond the phase's own wall time: where ranks share a core, one rank's phase runs
         * whole in a time slice while the other waits, so the wall time of a phase is its
         * unshared time, the wait is the core-mate's phase, and the shared GEMM rate already
         * prices both; the wait on top of that rate is only the drift that rate misses */
        if (!st) {
            double wall = 0;
            double t = time_allreduce(mesh, sizes[0], 12, true, &wall);
            double priced = SYNC_PHASE_FLOPS / out->matmul_flops;
            if (t < 0) st = oari_fail_status();
            else out->sync = fmax(0, wall + t - priced - t_small), out->sync_phase = priced;
        }
        /* the per-op cost of a training step on dtensors (dist dispatch, autograd) */
        if (!st) {
            double tdist = time_step_overhead(mesh, world);
            if (tdist <= 0) st = oari_fail_status();
            else if (tdist > out->op_overhead) out->op_overhead = tdist;
        }
        /* every rank must plan alike: the mean of the ranks' figures */
        if (!st) {
            enum { NV = 8 + 2 * OAR_PLAN_GEMM_CLASSES + OAR_PLAN_OP_FAMILIES + 3 + OAR_PLAN_GEMM_CLASSES };
            const int fam_at = 8 + 2 * OAR_PLAN_GEMM_CLASSES, cold_at = fam_at + OAR_PLAN_OP_FAMILIES;
            double v[NV] = {out->matmul_flops, out->ew_bw, out->op_overhead, a0, b0, out->optim_time, out->sync,
                            out->sync_phase};
            for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
                v[8 + i] = out->gemm_rate[i], v[8 + OAR_PLAN_GEMM_CLASSES + i] = out->gemm_rate_wide[i];
            for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) v[fam_at + i] = out->family_bw[i];
            v[cold_at] = out->cache_bytes, v[cold_at + 1] = out->ew_bw_cold, v[cold_at + 2] = out->optim_time_cold;
            for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) v[cold_at + 3 + i] = out->gemm_rate_cold[i];
            const int64_t nv = NV;
            oar_tensor *loc = oar_tensor_from_data(v, OAR_F64, 1, &nv);
            oar_placement part = oar_partial(OAR_REDUCE_SUM), rep = oar_replicate();
            oar_tensor *d = loc ? oar_dtensor_from_local(loc, mesh, &part, &nv) : NULL;
            oar_tensor *sum = d ? oar_reshard(d, mesh, &rep) : NULL;
            oar_tensor *lsum = sum ? oar_dtensor_local(sum) : NULL;
            if (!lsum) st = oari_fail_status();
            else {
                const double *p = oar_tensor_data(lsum);
                out->matmul_flops = p[0] / world, out->ew_bw = p[1] / world, out->op_overhead = p[2] / world;
                a0 = p[3] / world, b0 = p[4] / world, out->optim_time = p[5] / world, out->sync = p[6] / world;
                out->sync_phase = p[7] / world;
                for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++)
                    out->gemm_rate[i] = p[8 + i] / world,
                    out->gemm_rate_wide[i] = p[8 + OAR_PLAN_GEMM_CLASSES + i] / world;
                for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) out->family_bw[i] = p[fam_at + i] / world;
                out->cache_bytes = p[cold_at] / world, out->ew_bw_cold = p[cold_at + 1] / world;
                out->optim_time_cold = p[cold_at + 2] / world;
                for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) out->gemm_rate_cold[i] = p[cold_at + 3 + i] / world;
            }
            oar_tensor_release(sum);
            oar_tensor_release(d);
            oar_tensor_release(loc);
        }
        oar_mesh_release(mesh);
        if (st) return st;
        /* ring: t = 2(n-1) alpha + 2(n-1)/n bytes beta */
        out->alpha = a0 / (2.0 * (world - 1));
        out->beta = b0 * world / (2.0 * (world - 1));
        out->ranks = world;
    }
    return 0;
}

int oar_cluster_from_calib(oar_cluster *out, const oar_plan_calib *c, int n_devices, double mem_bytes) {
    if (!out) return oari_null_arg("oar_cluster_from_calib", "out");
    if (!c) return oari_null_arg("oar_cluster_from_calib", "calibration");
    if (!(c->beta > 0))
        return oari_error(OAR_ERR_INVALID, "oar_cluster_from_calib: the calibration has no collective figures "
                          "(beta %g): calibrate under mpirun with 2 or more ranks", c->beta);
    *out = (oar_cluster){.n_devices = n_devices, .devices_per_node = n_devices > 0 ? n_devices : 1,
                         .mem_bytes = mem_bytes, .flops = c->matmul_flops, .mem_bw = c->ew_bw,
                         .intra_bw = 1.0 / c->beta, .intra_lat = c->alpha, .inter_bw = 1.0 / c->beta,
                         .inter_lat = c->alpha, .op_overhead = c->op_overhead,
                         .optim_time_per_param = c->optim_time, .sync_lat = c->sync,
                         .sync_phase = c->sync_phase};
    memcpy(out->gemm_rate, c->gemm_rate, sizeof out->gemm_rate);
    memcpy(out->gemm_rate_wide, c->gemm_rate_wide, sizeof out->gemm_rate_wide);
    memcpy(out->family_bw, c->family_bw, sizeof out->family_bw);
    out->cache_bytes = c->cache_bytes, out->mem_bw_cold = c->ew_bw_cold, out->optim_time_cold = c->optim_time_cold;
    memcpy(out->gemm_rate_cold, c->gemm_rate_cold, sizeof out->gemm_rate_cold);
    return oar_cluster_check(out);
}

/* ---- the file ------------------------------------------------------------- */

static const char *const calib_keys[] = {"matmul_flops", "ew_bw", "op_overhead", "alpha", "beta"};
/* the scalars of memory past the cache, optional in version 2 */
static const char *const cold_keys[] = {"cache_bytes", "ew_bw_cold", "optim_time_cold"};

static double *calib_field(oar_plan_calib *c, int i) {
    double *f[] = {&c->matmul_flops, &c->ew_bw, &c->op_overhead, &c->alpha, &c->beta};
    return f[i];
}

int oar_plan_calib_save(const oar_plan_calib *c, const char *path) {
    if (!c) return oari_null_arg("oar_plan_calib_save", "calibration");
    if (!path) return oari_null_arg("oar_plan_calib_save", "path");
    oari_json_init();
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "format", "oar-plan-calibration-2");
    oar_plan_calib cc = *c;
    for (int i = 0; ok && i < 5; i++) ok = cJSON_AddNumberToObject(root, calib_keys[i], *calib_field(&cc, i));
    ok = ok && cJSON_AddNumberToObject(root, "ranks", c->ranks);
    /* the measured extras, when measured (0: not) */
    if (ok && c->optim_time > 0) ok = cJSON_AddNumberToObject(root, "optim_time", c->optim_time);
    if (ok && c->sync > 0) ok = cJSON_AddNumberToObject(root, "sync", c->sync);
    if (ok && c->sync_phase > 0) ok = cJSON_AddNumberToObject(root, "sync_phase", c->sync_phase);
    if (ok && c->gemm_rate[0] > 0) {
        cJSON *dims = cJSON_CreateDoubleArray(oar_plan_gemm_dims, OAR_PLAN_GEMM_CLASSES);
        ok = dims && cJSON_AddItemToObject(root, "gemm_dims", dims);
        if (!ok) cJSON_Delete(dims);
        cJSON *rates = ok ? cJSON_CreateDoubleArray(c->gemm_rate, OAR_PLAN_GEMM_CLASSES) : NULL;
        ok = rates && cJSON_AddItemToObject(root, "gemm_rates", rates);
        if (!ok) cJSON_Delete(rates);
    }
    bool any_family = false;
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) any_family |= c->family_bw[i] > 0;
    if (ok && any_family) {
        cJSON *fam = cJSON_CreateObject();
        ok = fam && cJSON_AddItemToObject(root, "family_bw", fam);
        if (!ok) cJSON_Delete(fam);
        for (int i = 0; ok && i < OAR_PLAN_OP_FAMILIES; i++)
            if (c->family_bw[i] > 0) ok = cJSON_AddNumberToObject(fam, oar_plan_op_family_names[i], c->family_bw[i]);
    }
    if (ok && c->gemm_rate[0] > 0 && c->gemm_rate_wide[0] > 0) {
        cJSON *rates = cJSON_CreateDoubleArray(c->gemm_rate_wide, OAR_PLAN_GEMM_CLASSES);
        ok = rates && cJSON_AddItemToObject(root, "gemm_rates_wide", rates);
        if (!ok) cJSON_Delete(rates);
    }
    const double cv[] = {c->cache_bytes, c->ew_bw_cold, c->optim_time_cold};
    for (int i = 0; ok && i < 3; i++)
        if (cv[i] > 0) ok = cJSON_AddNumberToObject(root, cold_keys[i], cv[i]);
    if (ok && c->gemm_rate_cold[0] > 0) {
        cJSON *rates = cJSON_CreateDoubleArray(c->gemm_rate_cold, OAR_PLAN_GEMM_CLASSES);
        ok = rates && cJSON_AddItemToObject(root, "gemm_rates_cold", rates);
        if (!ok) cJSON_Delete(rates);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return oari_nomem("oar_plan_calib_save: JSON");
    int st = oari_file_save(path, text, strlen(text), "oar_plan_calib_save");
    cJSON_free(text);
    return st;
}

int oar_plan_calib_load(oar_plan_calib *c, const char *path) {
    const char *fn = "oar_plan_calib_load";
    if (!c) return oari_null_arg(fn, "calibration");
    if (!path) return oari_null_arg(fn, "path");
    FILE *f = fopen(path, "rb");
    if (!f) return oari_error(OAR_ERR_IO, "%s: cannot open %s", fn, path);
    enum { MAX = 1 << 16 };
    char *text = oari_malloc(MAX + 1);
    if (!text) return fclose(f), oari_fail_status();
    size_t len = fread(text, 1, MAX + 1, f);
    bool err = ferror(f);
    fclose(f);
    if (err || len > MAX) {
        oari_free(text, MAX + 1);
        return oari_error(OAR_ERR_IO, "%s: %s: %s", fn, path, err ? "read failed" : "larger than 64 KiB: not a "
                          "calibration file");
    }
    text[len] = 0;
    oari_json_init();
    cJSON *root = cJSON_ParseWithLength(text, len);
    oari_free(text, MAX + 1);
    if (!root) {
        if (oari_json_take_oom()) return oari_nomem("oar_plan_calib_load: JSON");
        return oari_error(OAR_ERR_IO, "%s: %s is not JSON", fn, path);
    }
    int st = 0;
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    int version = !cJSON_IsString(fmt) ? 0 : !strcmp(fmt->valuestring, "oar-plan-calibration-1") ? 1
                : !strcmp(fmt->valuestring, "oar-plan-calibration-2") ? 2 : 0;
    if (!version)
        st = oari_error(OAR_ERR_IO, "%s: %s: format is not \"oar-plan-calibration-2\" (or -1)", fn, path);
    oar_plan_calib got = {0};
    for (int i = 0; !st && i < 5; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, calib_keys[i]);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
            (i < 2 && v->valuedouble <= 0))
            st = oari_error(OAR_ERR_IO, "%s: %s: \"%s\" is missing or not a %s number", fn, path, calib_keys[i],
                            i < 2 ? "positive" : "non-negative");
        else *calib_field(&got, i) = v->valuedouble;
    }
    cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "ranks");
    if (!st && (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 1e6))
        st = oari_error(OAR_ERR_IO, "%s: %s: \"ranks\" is missing or not a count", fn, path);
    if (!st) got.ranks = (int)r->valuedouble;
    /* version 2, optional (absent: not measured, left 0; version 1 files have neither): Adam's
     * time per element and the GEMM rates by smallest dimension */
    cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "optim_time");
    cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "gemm_dims");
    cJSON *rates = cJSON_GetObjectItemCaseSensitive(root, "gemm_rates");
    if (!st && version >= 2 && o) {
        if (!cJSON_IsNumber(o) || !isfinite(o->valuedouble) || o->valuedouble <= 0)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"optim_time\" is not a positive number", fn, path);
        else got.optim_time = o->valuedouble;
    }
    static const char *const sk[] = {"sync", "sync_phase"};
    double *sf[] = {&got.sync, &got.sync_phase};
    for (int i = 0; i < 2; i++) {
        cJSON *sy = cJSON_GetObjectItemCaseSensitive(root, sk[i]);
        if (st || version < 2 || !sy) continue;
        if (!cJSON_IsNumber(sy) || !isfinite(sy->valuedouble) || sy->valuedouble < 0)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"%s\" is not a non-negative number", fn, path, sk[i]);
        else *sf[i] = sy->valuedouble;
    }
    /* a table from 2 rows, or one written before the 2-row class (from 4 rows: that class is
     * left as those files priced it, the 4-row rate) */
    int n_tab = OAR_PLAN_GEMM_CLASSES, skip = 0;
    if (!st && version >= 2 && (dims || rates)) {
        n_tab = cJSON_IsArray(dims) ? cJSON_GetArraySize(dims) : -1;
        skip = OAR_PLAN_GEMM_CLASSES - n_tab;
        if (!cJSON_IsArray(rates) || (skip != 0 && skip != 1) || cJSON_GetArraySize(rates) != n_tab)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"gemm_dims\" and \"gemm_rates\" must be arrays of %d numbers "
                            "(or %d, from dimension %g)", fn, path, OAR_PLAN_GEMM_CLASSES,
                            OAR_PLAN_GEMM_CLASSES - 1, oar_plan_gemm_dims[1]);
        for (int i = 0; !st && i < n_tab; i++) {
            cJSON *d = cJSON_GetArrayItem(dims, i), *v = cJSON_GetArrayItem(rates, i);
            if (!cJSON_IsNumber(d) || d->valuedouble != oar_plan_gemm_dims[skip + i])
                st = oari_error(OAR_ERR_IO, "%s: %s: gemm_dims[%d] is not %g", fn, path, i,
                                oar_plan_gemm_dims[skip + i]);
            else if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
                st = oari_error(OAR_ERR_IO, "%s: %s: gemm_rates[%d] is not a positive number", fn, path, i);
            else got.gemm_rate[skip + i] = v->valuedouble;
        }
        if (!st && skip) got.gemm_rate[0] = got.gemm_rate[1];
    }
    /* op families' rates (optional in version 2; each family optional) */
    cJSON *fam = cJSON_GetObjectItemCaseSensitive(root, "family_bw");
    if (!st && version >= 2 && fam) {
        if (!cJSON_IsObject(fam)) st = oari_error(OAR_ERR_IO, "%s: %s: \"family_bw\" is not an object", fn, path);
        for (int i = 0; !st && i < OAR_PLAN_OP_FAMILIES; i++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(fam, oar_plan_op_family_names[i]);
            if (!v) continue;
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
                st = oari_error(OAR_ERR_IO, "%s: %s: family_bw \"%s\" is not a positive number", fn, path,
                                oar_plan_op_family_names[i]);
            else got.family_bw[i] = v->valuedouble;
        }
    }
    /* the table at the wide weight (optional in version 2; only beside gemm_rates) */
    cJSON *wide = cJSON_GetObjectItemCaseSensitive(root, "gemm_rates_wide");
    if (!st && version >= 2 && wide) {
        if (!rates || !cJSON_IsArray(wide) || cJSON_GetArraySize(wide) != n_tab)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"gemm_rates_wide\" must be an array of %d numbers beside "
                            "\"gemm_rates\"", fn, path, n_tab);
        for (int i = 0; !st && i < n_tab; i++) {
            cJSON *v = cJSON_GetArrayItem(wide, i);
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
                st = oari_error(OAR_ERR_IO, "%s: %s: gemm_rates_wide[%d] is not a positive number", fn, path, i);
            else got.gemm_rate_wide[skip + i] = v->valuedouble;
        }
        if (!st && skip) got.gemm_rate_wide[0] = got.gemm_rate_wide[1];
    }
    /* memory past the cache (optional in version 2; each figure optional, the table whole) */
    double *cf[] = {&got.cache_bytes, &got.ew_bw_cold, &got.optim_time_cold};
    for (int i = 0; i < 3 && !st && version >= 2; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, cold_keys[i]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"%s\" is not a positive number", fn, path, cold_keys[i]);
        else *cf[i] = v->valuedouble;
    }
    cJSON *cold = cJSON_GetObjectItemCaseSensitive(root, "gemm_rates_cold");
    if (!st && version >= 2 && cold) {
        if (!cJSON_IsArray(cold) || cJSON_GetArraySize(cold) != OAR_PLAN_GEMM_CLASSES)
            st = oari_error(OAR_ERR_IO, "%s: %s: \"gemm_rates_cold\" must be an array of %d numbers", fn, path,
                            OAR_PLAN_GEMM_CLASSES);
        for (int i = 0; !st && i < OAR_PLAN_GEMM_CLASSES; i++) {
            cJSON *v = cJSON_GetArrayItem(cold, i);
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
                st = oari_error(OAR_ERR_IO, "%s: %s: gemm_rates_cold[%d] is not a positive number", fn, path, i);
            else got.gemm_rate_cold[i] = v->valuedouble;
        }
    }
    if (!st) *c = got;
    cJSON_Delete(root);
    return st;
}

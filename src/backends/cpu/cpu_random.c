/* CPU kernels of the random ops on Philox4x32-10 (Salmon et al., SC'11).
 * Element i of a draw (in row-major order of the target) uses counter
 * offset + i under the key `seed`, so values never depend on the number of
 * threads. iattr[0]: seed, iattr[1]: offset. */
#include "cpu.h"

#include <math.h>

typedef struct { uint32_t v[4]; } philox_out;

static philox_out philox(uint64_t seed, uint64_t counter) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* Uniform doubles in [0, 1) with 53 random bits; (0, 1] for log's sake in u_open. */
static double u53(uint32_t hi, uint32_t lo) {
    return (double)(((uint64_t)hi << 21) ^ (lo >> 11)) * 0x1.0p-53;
}

typedef enum { UNIFORM, NORMAL, RANDINT, BERNOULLI } dist_kind;

static double draw(dist_kind kind, const oar_kernel_call *c, uint64_t seed, uint64_t counter,
                   const oar_ktensor *p, int64_t i) {
    philox_out r = philox(seed, counter);
    switch (kind) {
    case UNIFORM: {
        double lo = c->fattr[0], hi = c->fattr[1];
        return lo + (hi - lo) * u53(r.v[0], r.v[1]);
    }
    case NORMAL: {
        double u1 = 1.0 - u53(r.v[0], r.v[1]), u2 = u53(r.v[2], r.v[3]);
        return c->fattr[0] + c->fattr[1] * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    }
    case RANDINT: {
        uint64_t range = (uint64_t)(c->iattr[3] - c->iattr[2]);
        uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
        return (double)(c->iattr[2] + (int64_t)(bits % range));
    }
    case BERNOULLI: {
        int64_t off = oari_strided_index(p->ndim, p->shape, p->strides, i);
        double prob = oari_load_f64((const char *)p->data + off * (int64_t)oar_dtype_size((oar_dtype)p->dtype),
                                    (oar_dtype)p->dtype);
        return u53(r.v[0], r.v[1]) < prob ? 1.0 : 0.0;
    }
    }
    return 0;
}

static int run(dist_kind kind, const oar_kernel_call *c) {
    const oar_ktensor *t = kind == BERNOULLI ? &c->out[0] : &c->in[0];
    const oar_ktensor *p = kind == BERNOULLI ? &c->in[0] : NULL;
    uint64_t seed = (uint64_t)c->iattr[0], offset = (uint64_t)c->iattr[1];
    int64_t n = oari_kt_numel(t), es = (int64_t)oar_dtype_size((oar_dtype)t->dtype);
    bool contiguous = oari_kt_contiguous(t);
    OARI_PARALLEL_FOR_IF(n > 4096,
    for (int64_t i = 0; i < n; i++) {
        double v = draw(kind, c, seed, offset + (uint64_t)i, p, i);
        int64_t off = contiguous ? i : oari_strided_index(t->ndim, t->shape, t->strides, i);
        oari_store_f64((char *)t->data + off * es, (oar_dtype)t->dtype, v);
    });
    return 0;
}

static int k_uniform(void *ctx, const oar_kernel_call *c) { (void)ctx; return run(UNIFORM, c); }
static int k_normal(void *ctx, const oar_kernel_call *c) { (void)ctx; return run(NORMAL, c); }
static int k_randint(void *ctx, const oar_kernel_call *c) { (void)ctx; return run(RANDINT, c); }
static int k_bernoulli(void *ctx, const oar_kernel_call *c) { (void)ctx; return run(BERNOULLI, c); }

#define FLOATS(k) {[OAR_F16] = k, [OAR_BF16] = k, [OAR_F32] = k, [OAR_F64] = k}
const oari_cpu_kernels oari_cpu_k_uniform = FLOATS(k_uniform);
const oari_cpu_kernels oari_cpu_k_normal = FLOATS(k_normal);
const oari_cpu_kernels oari_cpu_k_randint = {[OAR_U8] = k_randint, [OAR_I8] = k_randint,
                                             [OAR_I32] = k_randint, [OAR_I64] = k_randint,
                                             [OAR_F32] = k_randint, [OAR_F64] = k_randint};
const oari_cpu_kernels oari_cpu_k_bernoulli = FLOATS(k_bernoulli);

/* int8 products through oneDNN (OAR_WITH_DNNL; cpu_dnnl_int8.h): uint8 or
 * int8 activations times int8 weights, int32 accumulation, the activation's
 * zero point given to oneDNN as a run-time attribute (one primitive serves
 * every zero point). On AVX512_VNNI oneDNN's brgemm kernels use vpdpbusd,
 * four u8 x s8 products summed into an s32 lane per instruction, without
 * the int16 saturation of the older vpmaddubsw path. Primitives are kept
 * per dtype, shape and thread count in a small cache (creating one costs
 * far more than a small product), evicted least recently used when no call
 * runs them; scratchpads are the caller's (user mode), so one cached
 * primitive runs on many threads at once. */
#include "cpu_dnnl_int8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#define SLOTS 32

typedef struct {
    int64_t a_dtype, m, k, n, threads;
} qkey;

typedef struct {
    qkey key;
    uint64_t last_use;
    dnnl_primitive_t prim; /* NULL: a free slot */
    dnnl_memory_desc_t md[3], zp_md, scratch;
    size_t scratch_bytes;
    int users;
} qslot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static qslot cache[SLOTS];
static uint64_t clock_now;
static dnnl_engine_t engine;

static int fail(const oari_dnnl_qmatmul_args *q, const char *step, dnnl_status_t st) {
    return oari_error(st == dnnl_out_of_memory ? OAR_ERR_NOMEM : OAR_ERR_UNSUPPORTED,
                      "qmatmul: oneDNN %s failed (%s) for %s [%lld, %lld] x int8 [%lld, %lld]", step,
                      dnnl_status2str(st), oar_dtype_name((oar_dtype)q->a_dtype), (long long)q->m,
                      (long long)q->k, (long long)q->k, (long long)q->n);
}

bool oari_dnnl_int8_exact(void) {
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        /* AVX-VNNI is cpuid leaf 7 sub-leaf 1's EAX bit 4, read directly:
         * clang 14's __builtin_cpu_supports does not know its name */
        unsigned a, b, c, d;
        __builtin_cpu_init();
        bool avx_vnni = __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
                        (a >> 4 & 1);
        h = __builtin_cpu_supports("avx512vnni") || avx_vnni;
#else
        h = 0; /* (oneDNN's int8 kernels elsewhere are not known to be exact) */
#endif
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

/* Makes slot s's primitive for q (the lock held). */
static int make(const oari_dnnl_qmatmul_args *q, qslot *s) {
    dnnl_status_t st;
    if (!engine && (st = dnnl_engine_create(&engine, dnnl_cpu, 0))) return fail(q, "engine", st);
    dnnl_dims_t ad = {q->m, q->k}, bd = {q->k, q->n}, cd = {q->m, q->n}, zd = {1};
    dnnl_data_type_t at = q->a_dtype == OAR_U8 ? dnnl_u8 : dnnl_s8;
    if ((st = dnnl_memory_desc_init_by_tag(&s->md[0], 2, ad, at, dnnl_ab)) ||
        (st = dnnl_memory_desc_init_by_tag(&s->md[1], 2, bd, dnnl_s8, dnnl_ab)) ||
        (st = dnnl_memory_desc_init_by_tag(&s->md[2], 2, cd, dnnl_s32, dnnl_ab)) ||
        (st = dnnl_memory_desc_init_by_tag(&s->zp_md, 1, zd, dnnl_s32, dnnl_a)))
        return fail(q, "memory description", st);
    dnnl_matmul_desc_t desc;
    if ((st = dnnl_matmul_desc_init(&desc, &s->md[0], &s->md[1], NULL, &s->md[2])))
        return fail(q, "matmul description", st);
    dnnl_primitive_attr_t attr;
    if ((st = dnnl_primitive_attr_create(&attr))) return fail(q, "attributes", st);
    dnnl_primitive_desc_t pd = NULL;
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (!st) st = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &DNNL_RUNTIME_S32_VAL);
    if (!st) st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st) return fail(q, "primitive description", st);
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    s->scratch = *scratch;
    s->scratch_bytes = dnnl_memory_desc_get_size(scratch);
    st = dnnl_primitive_create(&s->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st) {
        s->prim = NULL;
        return fail(q, "primitive creation", st);
    }
    return 0;
}

/* The slot holding q's primitive, made if new, marked in use. */
static qslot *acquire(const oari_dnnl_qmatmul_args *q, const qkey *k) {
    pthread_mutex_lock(&lock);
    qslot *hit = NULL, *victim = NULL;
    for (int i = 0; i < SLOTS && !hit; i++) {
        if (cache[i].prim && !memcmp(&cache[i].key, k, sizeof *k)) hit = &cache[i];
        else if (!cache[i].users && (!victim || !cache[i].prim ||
                                     (victim->prim && cache[i].last_use < victim->last_use)))
            victim = &cache[i];
    }
    if (!hit && !victim)
        oari_error(OAR_ERR_UNSUPPORTED, "qmatmul: all %d oneDNN int8 primitives are in use", SLOTS);
    if (!hit && victim) {
        if (victim->prim) dnnl_primitive_destroy(victim->prim);
        memset(victim, 0, sizeof *victim);
        if (!make(q, victim)) {
            victim->key = *k;
            hit = victim;
        }
    }
    if (hit) {
        hit->users++;
        hit->last_use = ++clock_now;
    }
    pthread_mutex_unlock(&lock);
    return hit;
}

static void release(qslot *s) {
    pthread_mutex_lock(&lock);
    s->users--;
    pthread_mutex_unlock(&lock);
}

int oari_dnnl_int8_cached_primitives(void) {
    pthread_mutex_lock(&lock);
    int n = 0;
    for (int i = 0; i < SLOTS; i++) n += cache[i].prim != NULL;
    pthread_mutex_unlock(&lock);
    return n;
}

static int execute(const oari_dnnl_qmatmul_args *q, const qslot *s) {
    dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
    dnnl_stream_t stream = NULL;
    void *scratch = NULL;
    int32_t zp = q->a_zero_point;
    if (s->scratch_bytes && !(scratch = oari_cpu_block_alloc(s->scratch_bytes))) return oari_fail_status();
    dnnl_status_t st = dnnl_memory_create(&mem[0], &s->md[0], engine, (void *)q->a);
    if (!st) st = dnnl_memory_create(&mem[1], &s->md[1], engine, (void *)q->b);
    if (!st) st = dnnl_memory_create(&mem[2], &s->md[2], engine, q->c);
    if (!st) st = dnnl_memory_create(&mem[3], &s->zp_md, engine, &zp);
    if (!st && scratch) st = dnnl_memory_create(&mem[4], &s->scratch, engine, scratch);
    if (!st) st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    if (!st) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]},
                                   {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, mem[3]},
                                   {DNNL_ARG_SCRATCHPAD, mem[4]}};
        st = dnnl_primitive_execute(s->prim, stream, scratch ? 5 : 4, args);
        if (!st) st = dnnl_stream_wait(stream);
    }
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < 5; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (scratch) oari_cpu_block_free(scratch, s->scratch_bytes);
    return st ? fail(q, "execution", st) : 0;
}

/* Below 2^22 multiply-adds on one thread: more only adds the team's start. */
int oari_dnnl_qmatmul(const oari_dnnl_qmatmul_args *q) {
    bool one = omp_get_max_threads() > 1 && q->m * q->k * q->n < ((int64_t)1 << 22) && !omp_in_parallel();
    oari_lib_icv icv = oari_lib_enter(one ? 1 : 0);
    qkey k = {q->a_dtype, q->m, q->k, q->n, omp_get_max_threads()};
    qslot *s = acquire(q, &k);
    int st = s ? execute(q, s) : oari_fail_status();
    if (s) release(s);
    oari_lib_leave(icv);
    return st;
}

/* bf16 matmul and conv2d through oneDNN (OAR_WITH_DNNL; cpu.h,
 * oari_dnnl_matmul, oari_dnnl_conv2d): its kernels take bf16 operands,
 * accumulate in f32 and write bf16, at twice the f32 rate on AVX512_BF16
 * (emulated, slower, on older CPUs); conv2d's forward also in f32 (all
 * operands f32: the stem route of cpu_conv.c). A whole batch is one
 * primitive call.
 * Creating a primitive costs far more than a small product (0.14 ms for a
 * bf16 matmul, which then runs a 64x64x64 product in 4.7 us; 4.6 ms for a
 * small conv and its reorders), so primitives are kept per op, shape,
 * strides and thread count in a small cache, evicted least recently used. Scratchpads are the caller's (user
 * mode): a cached primitive then runs on many threads at once, which
 * oneDNN's shared library scratchpad would not allow.
 * The f32 forward conv2d also runs on a weight packed once in the layout
 * oneDNN asked for (conv2d_prepacked, passes/prepack_conv.c): then no
 * weight reorder runs per call, which for ResNet's 512 x 512 x 3 x 3
 * weights (9.4 MB) cost as much as the convolution at batch 1. */
#include "cpu.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CACHE_SLOTS 64
#define MAX_RANK (OAR_MAX_DIMS + 2)
_Static_assert(MAX_RANK <= DNNL_MAX_NDIMS, "oneDNN takes every matmul rank");

enum { KIND_MATMUL = 1, KIND_CONV2D };

/* What a primitive is made for: the op, dtype, thread count and the op's
 * geometry in v; zeroed before it is filled, so it compares with memcmp. */
typedef struct {
    int kind, dtype, threads, rank;
    int64_t v[5 * MAX_RANK];
} prim_key;

/* A primitive and its operands: the caller's buffer i, described by md[i],
 * is its arg[i]; where the primitive wants another layout (a blocked one,
 * inner[i]), reorder[i] copies it there (the destination: back). */
typedef struct {
    prim_key key;
    uint64_t hash, last_use;
    dnnl_primitive_t prim; /* NULL: a free slot */
    int n_md, arg[4];
    dnnl_memory_desc_t md[4], inner[4], scratch;
    dnnl_primitive_t reorder[4];
    size_t scratch_bytes; /* the largest any of its primitives needs */
    int users; /* calls running it: not evicted meanwhile */
} prim_slot;

/* A call: the key, how to make its primitive, its buffers (arg order),
 * and what its error messages say, "<op>: oneDNN <step> failed (<status>)
 * for <what>", with what written by describe (only on failure). */
typedef struct call_desc call_desc;
struct call_desc {
    prim_key key;
    int (*make)(const call_desc *c, prim_slot *s);
    void (*describe)(const call_desc *c, char *what, size_t size);
    const void *args; /* the op's arguments (oari_dnnl_*_args) */
    void *ptr[4];
    const char *op;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static prim_slot cache[CACHE_SLOTS];
static uint64_t use_clock;
static dnnl_engine_t engine;

/* FNV-1a over the key's 8-byte words. */
static uint64_t key_hash(const prim_key *k) {
    _Static_assert(sizeof(prim_key) % 8 == 0, "a key is whole words");
    uint64_t h = 1469598103934665603ull, w;
    for (size_t i = 0; i < sizeof *k; i += 8) {
        memcpy(&w, (const char *)k + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    return h;
}

static int dnnl_fail(const call_desc *c, const char *step, dnnl_status_t st) {
    char what[480];
    c->describe(c, what, sizeof what);
    return oari_error(st == dnnl_out_of_memory ? OAR_ERR_NOMEM : OAR_ERR_UNSUPPORTED,
                      "%s: oneDNN %s failed (%s) for %s", c->op, step, dnnl_status2str(st), what);
}

/* Makes a primitive from pd (then destroyed), growing s's scratchpad to
 * what it needs. */
static dnnl_status_t make_primitive(prim_slot *s, dnnl_primitive_desc_t pd, dnnl_primitive_t *prim) {
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = dnnl_memory_desc_get_size(scratch);
    if (bytes > s->scratch_bytes) s->scratch = *scratch, s->scratch_bytes = bytes;
    dnnl_status_t st = dnnl_primitive_create(prim, pd);
    if (st) *prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* Frees s's primitives. */
static void clear_slot(prim_slot *s) {
    if (s->prim) dnnl_primitive_destroy(s->prim);
    for (int i = 0; i < 4; i++)
        if (s->reorder[i]) dnnl_primitive_destroy(s->reorder[i]);
    s->prim = NULL;
    memset(s->reorder, 0, sizeof s->reorder);
    s->scratch_bytes = 0;
}

/* What oneDNN calls operand `arg` of a primitive description, and
 * whether the primitive writes it. */
static dnnl_query_t query_of(int arg) {
    switch (arg) {
    case DNNL_ARG_SRC: return dnnl_query_src_md;
    case DNNL_ARG_WEIGHTS: return dnnl_query_weights_md;
    case DNNL_ARG_DST: return dnnl_query_dst_md;
    case DNNL_ARG_DIFF_SRC: return dnnl_query_diff_src_md;
    case DNNL_ARG_DIFF_WEIGHTS: return dnnl_query_diff_weights_md;
    default: return dnnl_query_diff_dst_md;
    }
}
static bool is_output(int arg) {
    return arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS;
}

/* Makes s's primitive from an op description (a backward one needs the
 * forward's description as its hint), its scratchpad in user mode. With
 * `any_layout`, the op's descriptions of operands 0..2 let oneDNN pick
 * their layouts: the ones that differ from s->md get reorders (operands
 * described, in s->md, as the caller holds them). */
static int make_from_desc(const call_desc *c, prim_slot *s, const void *op_desc, bool any_layout,
                          const_dnnl_primitive_desc_t hint, bool relu) {
    dnnl_status_t st;
    dnnl_primitive_attr_t attr, op_attr = NULL;
    if ((st = dnnl_primitive_attr_create(&attr))) return dnnl_fail(c, "attributes", st);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_post_ops_t post = NULL;
    if (!(st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) &&
        !(st = dnnl_primitive_attr_clone(&op_attr, attr)) && relu &&
        !(st = dnnl_post_ops_create(&post)) &&
        !(st = dnnl_post_ops_append_eltwise(post, 1.f, dnnl_eltwise_relu, 0.f, 0.f)))
        st = dnnl_primitive_attr_set_post_ops(op_attr, post);
    if (post) dnnl_post_ops_destroy(post);
    if (!st) st = dnnl_primitive_desc_create(&pd, op_desc, op_attr, engine, hint);
    if (op_attr) dnnl_primitive_attr_destroy(op_attr);
    if (st) {
        dnnl_primitive_attr_destroy(attr);
        return dnnl_fail(c, "primitive description", st);
    }
    for (int i = 0; i < 3 && any_layout; i++)
        s->inner[i] = *dnnl_primitive_desc_query_md(pd, query_of(s->arg[i]), 0);
    st = make_primitive(s, pd, &s->prim);
    for (int i = 0; i < 3 && any_layout && !st; i++) {
        if (dnnl_memory_desc_equal(&s->inner[i], &s->md[i])) continue;
        bool out = is_output(s->arg[i]);
        dnnl_primitive_desc_t rpd;
        st = dnnl_reorder_primitive_desc_create(&rpd, out ? &s->inner[i] : &s->md[i], engine,
                                                out ? &s->md[i] : &s->inner[i], engine, attr);
        if (!st) st = make_primitive(s, rpd, &s->reorder[i]);
    }
    dnnl_primitive_attr_destroy(attr);
    if (st) {
        clear_slot(s);
        return dnnl_fail(c, "primitive", st);
    }
    return 0;
}

/* The slot for c's key, its primitive made if new, with one more user;
 * NULL on failure (error set). */
static prim_slot *acquire(const call_desc *c) {
    const prim_key *k = &c->key;
    uint64_t h = key_hash(k);
    pthread_mutex_lock(&cache_lock);
    prim_slot *hit = NULL, *victim = NULL;
    for (int i = 0; i < CACHE_SLOTS && !hit; i++) {
        prim_slot *s = &cache[i];
        if (s->prim && s->hash == h && !memcmp(&s->key, k, sizeof *k)) hit = s;
        else if (!s->users && (!victim || !s->prim || (victim->prim && s->last_use < victim->last_use)))
            victim = s; /* a free slot, else the least recently used idle one */
    }
    if (!hit && victim) {
        clear_slot(victim);
        victim->key = *k;
        victim->hash = h;
        dnnl_status_t st = engine ? dnnl_success : dnnl_engine_create(&engine, dnnl_cpu, 0);
        if (st) dnnl_fail(c, "engine", st);
        else if (!c->make(c, victim)) hit = victim;
    } else if (!hit) {
        oari_error(OAR_ERR_STATE, "%s: all %d oneDNN primitive slots are running", c->op, CACHE_SLOTS);
    }
    if (hit) {
        hit->users++;
        hit->last_use = ++use_clock;
    }
    pthread_mutex_unlock(&cache_lock);
    return hit;
}

static void release(prim_slot *s) {
    pthread_mutex_lock(&cache_lock);
    s->users--;
    pthread_mutex_unlock(&cache_lock);
}

int oari_dnnl_cached_primitives(void) {
    pthread_mutex_lock(&cache_lock);
    int n = 0;
    for (int i = 0; i < CACHE_SLOTS; i++) n += cache[i].prim != NULL;
    pthread_mutex_unlock(&cache_lock);
    return n;
}

/* Runs a reorder from memory `from` to `to`. */
static dnnl_status_t run_reorder(dnnl_primitive_t r, dnnl_stream_t stream, dnnl_memory_t from, dnnl_memory_t to,
                                 dnnl_memory_t scratch) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, scratch}};
    return dnnl_primitive_execute(r, stream, scratch ? 3 : 2, args);
}

/* Runs slot s's primitives on c's buffers: reorders in, the op, reorders
 * out, in one in-order stream; the scratchpad and the reordered copies
 * come from the CPU block cache (no page faults once warm). */
static int execute(const call_desc *c, const prim_slot *s) {
    void *bufs[5] = {NULL, NULL, NULL, NULL, NULL};
    size_t sizes[5] = {0, 0, 0, 0, 0};
    dnnl_memory_t user[4] = {NULL, NULL, NULL, NULL}, inner[4] = {NULL, NULL, NULL, NULL}, scratch = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_status_t st = dnnl_success;
    int status = 0;
    for (int i = 0; i < 5 && !status; i++) {
        sizes[i] = i == 4 ? s->scratch_bytes : s->reorder[i] ? dnnl_memory_desc_get_size(&s->inner[i]) : 0;
        if (sizes[i] && !(bufs[i] = oari_cpu_block_alloc(sizes[i]))) status = oari_fail_status();
    }
    dnnl_exec_arg_t args[5];
    int nargs = 0;
    for (int i = 0; i < s->n_md && !status && !st; i++) {
        st = dnnl_memory_create(&user[i], &s->md[i], engine, c->ptr[i]);
        if (!st && s->reorder[i]) st = dnnl_memory_create(&inner[i], &s->inner[i], engine, bufs[i]);
        args[nargs++] = (dnnl_exec_arg_t){s->arg[i], s->reorder[i] ? inner[i] : user[i]};
    }
    if (!status && !st && s->scratch_bytes) {
        st = dnnl_memory_create(&scratch, &s->scratch, engine, bufs[4]);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch};
    }
    if (!status && !st) st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    for (int i = 0; i < s->n_md && !status && !st; i++)
        if (s->reorder[i] && !is_output(s->arg[i]))
            st = run_reorder(s->reorder[i], stream, user[i], inner[i], scratch);
    if (!status && !st) st = dnnl_primitive_execute(s->prim, stream, nargs, args);
    for (int i = 0; i < s->n_md && !status && !st; i++)
        if (s->reorder[i] && is_output(s->arg[i]))
            st = run_reorder(s->reorder[i], stream, inner[i], user[i], scratch);
    if (!status && !st) st = dnnl_stream_wait(stream);
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < 4; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (inner[i]) dnnl_memory_destroy(inner[i]);
    }
    if (scratch) dnnl_memory_destroy(scratch);
    for (int i = 0; i < 5; i++)
        if (bufs[i]) oari_cpu_block_free(bufs[i], sizes[i]);
    return status ? status : st ? dnnl_fail(c, "execution", st) : 0;
}

/* Runs call c: below `below` multiply-adds (2^23, as f32's gemm does,
 * cpu_linalg.c) on one thread: a 64x64x64 product took 85 us on two
 * threads of a loaded machine against 4.5 us on one. A conv on a packed
 * weight goes to one thread only below 2^20: ResNet-18's 1x1 256 -> 512
 * shortcut at batch 1 (6.4M) took 234 us on one against 131 us for
 * conv2d's gemm on two. oneDNN takes its thread count from OpenMP, when
 * the primitive is made (its blocking) and run. */
#define ONE_THREAD_BELOW ((int64_t)1 << 23)
#define PACKED_ONE_THREAD_BELOW ((int64_t)1 << 20)
static bool one_thread_for(int64_t work, int64_t below) {
    return omp_get_max_threads() > 1 && work < below && !omp_in_parallel();
}

static int run(call_desc *c, int64_t work, int64_t below) {
    oari_lib_icv icv = oari_lib_enter(one_thread_for(work, below) ? 1 : 0);
    c->key.threads = omp_get_max_threads();
    prim_slot *s = acquire(c);
    int st = s ? execute(c, s) : oari_fail_status();
    if (s) release(s);
    oari_lib_leave(icv);
    return st;
}

/* ---- matmul ------------------------------------------------------------- */

bool oari_dnnl_has_bf16(void) {
    static int have = -1; /* -1: not asked yet */
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h >= 0) return h;
    dnnl_engine_t e;
    bool ok = false;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) == dnnl_success) {
        dnnl_dims_t d = {16, 16};
        dnnl_memory_desc_t md;
        dnnl_matmul_desc_t desc;
        dnnl_primitive_desc_t pd;
        ok = !dnnl_memory_desc_init_by_tag(&md, 2, d, dnnl_bf16, dnnl_ab) &&
             !dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md) &&
             !dnnl_primitive_desc_create(&pd, &desc, NULL, e, NULL);
        if (ok) dnnl_primitive_desc_destroy(pd);
        dnnl_engine_destroy(e);
    }
    __atomic_store_n(&have, ok, __ATOMIC_RELAXED);
    return ok;
}

/* key.v: A's dims and strides, B's dims and strides, C's dims, MAX_RANK
 * entries each. */
static int make_matmul(const call_desc *c, prim_slot *s) {
    const prim_key *k = &c->key;
    const int64_t *v = k->v;
    /* (oneDNN's prototypes take DNNL_MAX_NDIMS entries) */
    dnnl_dims_t ad = {0}, as = {0}, bd = {0}, bs = {0}, cd = {0}, cs = {0};
    size_t nbytes = (size_t)k->rank * sizeof(int64_t);
    memcpy(ad, v, nbytes), memcpy(as, v + MAX_RANK, nbytes);
    memcpy(bd, v + 2 * MAX_RANK, nbytes), memcpy(bs, v + 3 * MAX_RANK, nbytes);
    memcpy(cd, v + 4 * MAX_RANK, nbytes);
    oari_contiguous_strides(k->rank, cd, cs);
    dnnl_status_t st;
    s->n_md = 3;
    s->arg[0] = DNNL_ARG_SRC, s->arg[1] = DNNL_ARG_WEIGHTS, s->arg[2] = DNNL_ARG_DST;
    if ((st = dnnl_memory_desc_init_by_strides(&s->md[0], k->rank, ad, dnnl_bf16, as)) ||
        (st = dnnl_memory_desc_init_by_strides(&s->md[1], k->rank, bd, dnnl_bf16, bs)) ||
        (st = dnnl_memory_desc_init_by_strides(&s->md[2], k->rank, cd, dnnl_bf16, cs)))
        return dnnl_fail(c, "memory description", st);
    dnnl_matmul_desc_t desc;
    if ((st = dnnl_matmul_desc_init(&desc, &s->md[0], &s->md[1], NULL, &s->md[2])))
        return dnnl_fail(c, "matmul description", st);
    return make_from_desc(c, s, &desc, false, NULL, false);
}

static void describe_matmul(const call_desc *c, char *what, size_t size) {
    const oari_dnnl_matmul_args *m = c->args;
    char sa[200], sb[200];
    snprintf(what, size, "%s operands %s and %s", oar_dtype_name((oar_dtype)m->dtype),
             oari_shape_str(sa, m->rank, m->a_dims), oari_shape_str(sb, m->rank, m->b_dims));
}

int oari_dnnl_matmul(const oari_dnnl_matmul_args *m) {
    if (m->dtype != OAR_BF16 || m->rank < 2 || m->rank > MAX_RANK)
        return oari_error(OAR_ERR_UNSUPPORTED, "matmul: no oneDNN kernel for %s operands of %d dims",
                          oar_dtype_name((oar_dtype)m->dtype), m->rank);
    call_desc c;
    memset(&c.key, 0, sizeof c.key);
    c.key.kind = KIND_MATMUL;
    c.key.dtype = m->dtype;
    c.key.rank = m->rank;
    size_t nbytes = (size_t)m->rank * sizeof(int64_t);
    int64_t *v = c.key.v;
    memcpy(v, m->a_dims, nbytes), memcpy(v + MAX_RANK, m->a_strides, nbytes);
    memcpy(v + 2 * MAX_RANK, m->b_dims, nbytes), memcpy(v + 3 * MAX_RANK, m->b_strides, nbytes);
    memcpy(v + 4 * MAX_RANK, m->c_dims, nbytes);
    c.make = make_matmul;
    c.describe = describe_matmul;
    c.args = m;
    c.ptr[0] = (void *)m->a, c.ptr[1] = (void *)m->b, c.ptr[2] = m->c;
    c.op = "matmul";
    int64_t work = m->a_dims[m->rank - 1];
    for (int d = 0; d < m->rank; d++) work *= m->c_dims[d];
    return run(&c, work, ONE_THREAD_BELOW);
}

/* ---- conv2d ------------------------------------------------------------- */

/* key.v: the fields of oari_dnnl_conv2d_args from n to groups, then
 * whether there is a bias, the pass, f32_out, the weight's packing and
 * blocks, and relu. */
enum { CV_N, CV_C, CV_H, CV_W, CV_O, CV_KH, CV_KW, CV_OH, CV_OW, CV_SH, CV_SW, CV_PH, CV_PW,
       CV_DH, CV_DW, CV_GROUPS, CV_BIAS, CV_PASS, CV_F32_OUT, CV_PACKED, CV_IB, CV_OB, CV_RELU, CV_COUNT };

/* conv2d_prepacked's weight layouts (defs/conv.def: order, blocks ib and
 * ob) that oneDNN's f32 forward convolutions ask for, by oneDNN's name. */
static const struct {
    int order;
    int64_t ib, ob;
    dnnl_format_tag_t tag;
} packed_tags[] = {
    {0, 16, 16, dnnl_OIhw16i16o}, {0, 16, 32, dnnl_OIhw16i32o}, {0, 16, 64, dnnl_OIhw16i64o},
    {0, 8, 8, dnnl_OIhw8i8o},     {0, 4, 4, dnnl_OIhw4i4o},     {1, 1, 4, dnnl_Ohwi4o},
    {1, 1, 8, dnnl_Ohwi8o},       {1, 1, 16, dnnl_Ohwi16o},     {1, 1, 32, dnnl_Ohwi32o},
    {1, 1, 48, dnnl_Ohwi48o},     {1, 1, 64, dnnl_Ohwi64o},
};

/* The tag of a packed layout; dnnl_format_tag_undef for none. */
static dnnl_format_tag_t packed_tag(int64_t order, int64_t ib, int64_t ob) {
    for (size_t i = 0; i < sizeof packed_tags / sizeof *packed_tags; i++)
        if (packed_tags[i].order == order && packed_tags[i].ib == ib && packed_tags[i].ob == ob)
            return packed_tags[i].tag;
    return dnnl_format_tag_undef;
}

/* The f32 forward description of key values v: x and y in any layout,
 * the weight's layout `wmd`. */
static dnnl_status_t forward_desc(const int64_t *v, const dnnl_memory_desc_t *wmd, dnnl_convolution_desc_t *d) {
    dnnl_dims_t xd = {v[CV_N], v[CV_C], v[CV_H], v[CV_W]}, yd = {v[CV_N], v[CV_O], v[CV_OH], v[CV_OW]};
    dnnl_dims_t bd = {v[CV_O]}, strides = {v[CV_SH], v[CV_SW]}, dil = {v[CV_DH] - 1, v[CV_DW] - 1},
                pad = {v[CV_PH], v[CV_PW]};
    dnnl_memory_desc_t x, y, b;
    dnnl_status_t st;
    if ((st = dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a)))
        return st;
    return dnnl_dilated_convolution_forward_desc_init(d, dnnl_forward_inference, dnnl_convolution_direct, &x, wmd,
                                                      v[CV_BIAS] ? &b : NULL, &y, strides, dil, pad, pad);
}

/* The forward, backward-data or backward-weights convolution of the key.
 * Operands 0..2 are, in that order, what the pass reads and then writes:
 * forward x, weight -> y; backward data y, weight -> x; backward weights
 * x, y -> weight. Their layouts are oneDNN's choice (blocked: nchw sent it
 * to im2col + gemm, half the speed), reordered from and to the caller's. */
static int make_conv2d(const call_desc *c, prim_slot *s) {
    const int64_t *v = c->key.v;
    const int64_t g = v[CV_GROUPS], pass = v[CV_PASS];
    dnnl_dims_t xd = {v[CV_N], v[CV_C], v[CV_H], v[CV_W]}, yd = {v[CV_N], v[CV_O], v[CV_OH], v[CV_OW]};
    dnnl_dims_t gwd = {g, v[CV_O] / g, v[CV_C] / g, v[CV_KH], v[CV_KW]}, bd = {v[CV_O]};
    dnnl_dims_t wd = {v[CV_O], v[CV_C] / g, v[CV_KH], v[CV_KW]};
    /* oneDNN's dilation counts the gaps: 0 is dense; padding on the right
     * as on the left (oneDNN's output size floors as oar's does) */
    dnnl_dims_t strides = {v[CV_SH], v[CV_SW]}, dil = {v[CV_DH] - 1, v[CV_DW] - 1},
                pad = {v[CV_PH], v[CV_PW]};
    dnnl_status_t st;
    /* user layouts and oneDNN's "any" of x, weight, y, in bf16 (k = 0, 1),
     * and "any" with the written one (written[pass]) in f32 under f32_out
     * (k = 2): a backward pass's hint is the bf16 forward */
    static const int written[3] = {2, 0, 1};
    dnnl_memory_desc_t user[3], any16[3], any[3], bias;
    for (int k = 0; k < 3; k++) {
        dnnl_format_tag_t act = k ? dnnl_format_tag_any : dnnl_nchw;
        dnnl_format_tag_t wt = k ? dnnl_format_tag_any : g > 1 ? dnnl_goihw : dnnl_oihw;
        const dnnl_data_type_t base = c->key.dtype == OAR_F32 ? dnnl_f32 : dnnl_bf16;
        dnnl_data_type_t dt[3] = {base, base, base};
        if (k != 1 && v[CV_F32_OUT]) dt[written[pass]] = dnnl_f32;
        dnnl_memory_desc_t *m = k == 0 ? user : k == 1 ? any16 : any;
        if ((st = dnnl_memory_desc_init_by_tag(&m[0], 4, xd, dt[0], act)) ||
            (st = g > 1 ? dnnl_memory_desc_init_by_tag(&m[1], 5, gwd, dt[1], wt)
                        : dnnl_memory_desc_init_by_tag(&m[1], 4, wd, dt[1], wt)) ||
            (st = dnnl_memory_desc_init_by_tag(&m[2], 4, yd, dt[2], act)))
            return dnnl_fail(c, "memory description", st);
    }
    if ((st = dnnl_memory_desc_init_by_tag(&bias, 1, bd, c->key.dtype == OAR_F32 ? dnnl_f32 : dnnl_bf16,
                                           dnnl_a)) ||
        (v[CV_PACKED] && (st = dnnl_memory_desc_init_by_tag(&user[1], 4, wd, dnnl_f32,
                                                            packed_tag(v[CV_PACKED] - 1, v[CV_IB], v[CV_OB])))))
        return dnnl_fail(c, "memory description", st);
    bool with_bias = pass == OARI_DNNL_FORWARD && v[CV_BIAS];
    dnnl_convolution_desc_t fwd;
    if ((st = dnnl_dilated_convolution_forward_desc_init(
             &fwd, pass == OARI_DNNL_FORWARD ? dnnl_forward_inference : dnnl_forward_training,
             dnnl_convolution_direct, pass == OARI_DNNL_FORWARD ? &any[0] : &any16[0],
             pass == OARI_DNNL_FORWARD ? &any[1] : &any16[1], with_bias ? &bias : NULL,
             pass == OARI_DNNL_FORWARD ? &any[2] : &any16[2], strides, dil, pad, pad)))
        return dnnl_fail(c, "convolution description", st);
    /* operand order of the pass: (read, read, written) */
    static const int order[3][3] = {{0, 1, 2}, {2, 1, 0}, {0, 2, 1}};
    static const int args[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                                    {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    s->n_md = with_bias ? 4 : 3;
    for (int i = 0; i < 3; i++) s->md[i] = user[order[pass][i]], s->arg[i] = args[pass][i];
    s->md[3] = bias, s->arg[3] = DNNL_ARG_BIAS;
    if (pass == OARI_DNNL_FORWARD) return make_from_desc(c, s, &fwd, true, NULL, v[CV_RELU]);
    dnnl_primitive_desc_t hint;
    if ((st = dnnl_primitive_desc_create(&hint, &fwd, NULL, engine, NULL)))
        return dnnl_fail(c, "forward description (the backward's hint)", st);
    dnnl_convolution_desc_t bwd;
    st = pass == OARI_DNNL_BACKWARD_DATA
             ? dnnl_dilated_convolution_backward_data_desc_init(&bwd, dnnl_convolution_direct, &any[0], &any[1],
                                                                &any[2], strides, dil, pad, pad)
             : dnnl_dilated_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &any[0],
                                                                   &any[1], NULL, &any[2], strides, dil, pad, pad);
    int r = st ? dnnl_fail(c, "convolution description", st) : make_from_desc(c, s, &bwd, true, hint, false);
    dnnl_primitive_desc_destroy(hint);
    return r;
}

static void describe_conv2d(const call_desc *c, char *what, size_t size) {
    const oari_dnnl_conv2d_args *a = c->args;
    const int64_t g = a->groups > 0 ? a->groups : 1;
    int64_t xs[4] = {a->n, a->c, a->h, a->w}, ws[4] = {a->o, a->c / g, a->kh, a->kw};
    char sx[200], sw[200];
    snprintf(what, size, "%s input %s, weight %s, stride %lldx%lld, padding %lldx%lld, "
             "dilation %lldx%lld, groups %lld", oar_dtype_name((oar_dtype)a->dtype), oari_shape_str(sx, 4, xs),
             oari_shape_str(sw, 4, ws), (long long)a->sh, (long long)a->sw, (long long)a->ph, (long long)a->pw,
             (long long)a->dh, (long long)a->dw, (long long)g);
}

int oari_dnnl_conv2d(const oari_dnnl_conv2d_args *a) {
    static const char *const ops[3] = {"conv2d", "conv_transpose2d", "conv2d_weight_grad"};
    if (a->pass < OARI_DNNL_FORWARD || a->pass > OARI_DNNL_BACKWARD_WEIGHTS)
        return oari_error(OAR_ERR_INVALID, "conv2d: no oneDNN pass %d", a->pass);
    const int64_t g = a->groups > 0 ? a->groups : 1;
    if (a->dtype != OAR_BF16 && !(a->dtype == OAR_F32 && a->pass == OARI_DNNL_FORWARD && !a->f32_out))
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: no oneDNN kernel for %s input", ops[a->pass],
                          oar_dtype_name((oar_dtype)a->dtype));
    if ((a->packed || a->relu) &&
        (a->dtype != OAR_F32 || a->pass != OARI_DNNL_FORWARD || g != 1 ||
         (a->packed && packed_tag(a->packed - 1, a->ib, a->ob) == dnnl_format_tag_undef)))
        return oari_error(OAR_ERR_UNSUPPORTED, "conv2d: no oneDNN kernel for a packed weight (layout %d, blocks "
                          "%lld, %lld) or relu with %s input, groups %lld", a->packed, (long long)a->ib,
                          (long long)a->ob, oar_dtype_name((oar_dtype)a->dtype), (long long)g);
    call_desc c;
    memset(&c.key, 0, sizeof c.key);
    c.key.kind = KIND_CONV2D;
    c.key.dtype = a->dtype;
    const int64_t geom[CV_COUNT] = {a->n,  a->c,  a->h,  a->w,  a->o, a->kh, a->kw, a->oh, a->ow, a->sh,
                                    a->sw, a->ph, a->pw, a->dh, a->dw, g,     a->bias != NULL, a->pass,
                                    a->f32_out, a->packed, a->packed ? a->ib : 0, a->packed ? a->ob : 0,
                                    a->relu};
    memcpy(c.key.v, geom, sizeof geom);
    c.make = make_conv2d;
    c.describe = describe_conv2d;
    c.args = a;
    void *const ops_of[3][3] = {{a->x, a->weight, a->y}, {a->y, a->weight, a->x}, {a->x, a->y, a->weight}};
    for (int i = 0; i < 3; i++) c.ptr[i] = ops_of[a->pass][i];
    c.ptr[3] = (void *)a->bias;
    c.op = ops[a->pass];
    return run(&c, a->n * a->o * a->oh * a->ow * (a->c / g) * a->kh * a->kw,
               a->packed ? PACKED_ONE_THREAD_BELOW : ONE_THREAD_BELOW);
}

int oari_dnnl_conv2d_layout(const oari_dnnl_conv2d_args *a, int *order, int64_t *ib, int64_t *ob) {
    call_desc c = {.describe = describe_conv2d, .args = a, .op = "conv2d"};
    const int64_t v[CV_COUNT] = {[CV_N] = a->n,   [CV_C] = a->c,   [CV_H] = a->h,   [CV_W] = a->w,
                                 [CV_O] = a->o,   [CV_KH] = a->kh, [CV_KW] = a->kw, [CV_OH] = a->oh,
                                 [CV_OW] = a->ow, [CV_SH] = a->sh, [CV_SW] = a->sw, [CV_PH] = a->ph,
                                 [CV_PW] = a->pw, [CV_DH] = a->dh, [CV_DW] = a->dw, [CV_BIAS] = a->bias != NULL};
    if (a->groups > 1 || a->n < 1 || a->c < 1 || a->o < 1 || a->oh < 1 || a->ow < 1)
        return oari_error(OAR_ERR_UNSUPPORTED, "conv2d: no packed oneDNN layout with groups or empty dims");
    pthread_mutex_lock(&cache_lock);
    dnnl_status_t st = engine ? dnnl_success : dnnl_engine_create(&engine, dnnl_cpu, 0);
    pthread_mutex_unlock(&cache_lock);
    if (st) return dnnl_fail(&c, "engine", st);
    /* the threads run() gives a call of this size: oneDNN blocks for them */
    oari_lib_icv icv =
        oari_lib_enter(one_thread_for(a->n * a->o * a->oh * a->ow * a->c * a->kh * a->kw, PACKED_ONE_THREAD_BELOW) ? 1 : 0);
    dnnl_dims_t wd = {a->o, a->c, a->kh, a->kw};
    dnnl_memory_desc_t any, want, m;
    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post = NULL;
    if (!(st = dnnl_memory_desc_init_by_tag(&any, 4, wd, dnnl_f32, dnnl_format_tag_any)) &&
        !(st = forward_desc(v, &any, &d)) && !(st = dnnl_primitive_attr_create(&attr)) && a->relu &&
        !(st = dnnl_post_ops_create(&post)) &&
        !(st = dnnl_post_ops_append_eltwise(post, 1.f, dnnl_eltwise_relu, 0.f, 0.f)))
        st = dnnl_primitive_attr_set_post_ops(attr, post);
    if (!st) st = dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL);
    if (!st) want = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (pd) dnnl_primitive_desc_destroy(pd);
    oari_lib_leave(icv);
    if (st) return dnnl_fail(&c, "primitive description", st);
    for (size_t i = 0; i < sizeof packed_tags / sizeof *packed_tags; i++) {
        if (dnnl_memory_desc_init_by_tag(&m, 4, wd, dnnl_f32, packed_tags[i].tag) ||
            !dnnl_memory_desc_equal(&m, &want))
            continue;
        *order = packed_tags[i].order, *ib = packed_tags[i].ib, *ob = packed_tags[i].ob;
        return 0;
    }
    return oari_error(OAR_ERR_UNSUPPORTED, "conv2d: oneDNN's weight layout for this convolution is not one "
                      "conv2d_prepacked packs");
}

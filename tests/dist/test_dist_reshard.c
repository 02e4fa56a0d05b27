/* Reshard by all-to-all and moves between meshes: Shard(a) -> Shard(b)
 * along one mesh dim is one all-to-all (1-D and 2-D meshes, even and
 * uneven splits), its gradient the reverse all-to-all; a dtensor moves to
 * another mesh (other ranks, the same ranks arranged otherwise) by
 * point-to-point messages, its gradient the reverse move. Values against
 * the global value; gradients against central differences (gradcheck.h)
 * or closed forms. Runs on any number of ranks (CTest: 1, 2 and 4); the
 * moves between disjoint rank sets need 4. The whole program runs on the
 * failing allocator of alloc_fail.h, so a local call (a reducer's
 * creation) is also checked failing at each of its allocations. */
#include "test.h"
#include "alloc_fail.h"
#include "gradcheck.h"
#include "dist/dist.h"

#include <oar/dist.h>
#include <time.h>

static int W, ME;

static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    if (!oar_tensor_numel(a)) return 0;
    oar_tensor *d = oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), 0, NULL, false);
    return d ? oar_tensor_item(d) : INFINITY;
}

/* The local shard of y has the torch.chunk extent on every sharded dim. */
static bool chunk_shapes(oar_tensor *y, oar_tensor *g) {
    oar_mesh *m = y ? oar_dtensor_mesh(y) : NULL;
    const oar_placement *p = y ? oar_dtensor_placements(y) : NULL;
    oar_tensor *loc = y ? oar_dtensor_local(y) : NULL;
    if (!m || !p || !loc) return false;
    for (int d = 0; d < oar_mesh_ndim(m); d++) {
        if (p[d].kind != OAR_PLACEMENT_SHARD) continue;
        int64_t s, l;
        oari_chunk(oar_tensor_shape(g)[p[d].dim], oar_mesh_shape(m)[d], oar_mesh_coord(m, d), &s, &l);
        if (oar_tensor_shape(loc)[p[d].dim] != l) return false;
    }
    return true;
}

/* shard(g, from) -> reshard(to): the global value is kept, the shard has
 * the chunk extent, and exactly `a2a` all-to-alls and `gathers`
 * all-gathers ran. */
static void check_s2s(oar_mesh *m, oar_tensor *g, const oar_placement *from, const oar_placement *to, int a2a,
                      int gathers) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_shard_tensor(g, m, from);
    int64_t c0 = oari_dist_calls(OARI_COLL_ALL_TO_ALL), g0 = oari_dist_calls(OARI_COLL_ALL_GATHER);
    oar_tensor *y = oar_reshard(x, m, to);
    int64_t c1 = oari_dist_calls(OARI_COLL_ALL_TO_ALL), g1 = oari_dist_calls(OARI_COLL_ALL_GATHER);
    char sa[64], sb[64];
    oar_placements_str(m, from, sa, sizeof sa);
    oar_placements_str(m, to, sb, sizeof sb);
    double err = max_diff(oar_unshard(y), g);
    if (!(err == 0) || c1 - c0 != a2a || g1 - g0 != gathers || !chunk_shapes(y, g))
        fprintf(stderr, "rank %d: [%s] -> [%s] on %lld x %lld: error %g, %lld all-to-all, %lld all-gather (%s)\n",
                ME, sa, sb, (long long)oar_tensor_shape(g)[0], (long long)oar_tensor_shape(g)[1], err,
                (long long)(c1 - c0), (long long)(g1 - g0), oar_last_error());
    CHECK(err == 0);
    CHECK(c1 - c0 == a2a && g1 - g0 == gathers);
    CHECK(chunk_shapes(y, g));
    oar_pool_pop(pool);
}

static void test_all_to_all_1d(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    /* even, uneven both ways, fewer rows than ranks */
    int64_t shapes[4][2] = {{2 * W, 3 * W}, {2 * W + 1, W + 2}, {W + 1, 2 * W - 1}, {1, 5}};
    for (int s = 0; s < 4; s++) {
        oar_pool *pool = oar_pool_push();
        oar_manual_seed(40 + s);
        oar_tensor *g = oar_randn(s % 2 ? OAR_F32 : OAR_F64, 2, shapes[s]);
        check_s2s(m, g, (oar_placement[]){oar_shard(0)}, (oar_placement[]){oar_shard(1)}, 1, 0);
        check_s2s(m, g, (oar_placement[]){oar_shard(1)}, (oar_placement[]){oar_shard(0)}, 1, 0);
        oar_pool_pop(pool);
    }
    /* 3-D: the outer and inner dims around the moved ones stay in order */
    oar_pool *pool = oar_pool_push();
    oar_tensor *g3 = oar_randn(OAR_F64, 3, (int64_t[]){3, 2 * W + 1, 4});
    check_s2s(m, g3, (oar_placement[]){oar_shard(1)}, (oar_placement[]){oar_shard(2)}, 1, 0);
    check_s2s(m, g3, (oar_placement[]){oar_shard(2)}, (oar_placement[]){oar_shard(0)}, 1, 0);
    /* a shard that is not contiguous (a transposed dtensor's) is packed */
    {
        oar_tensor *g2 = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, W + 2});
        oar_tensor *xt = oar_transpose(oar_shard_tensor(g2, m, (oar_placement[]){oar_shard(0)}), 0, 1);
        CHECK(xt && oar_dtensor_placements(xt)[0].dim == 1);
        CHECK(oar_tensor_shape(oar_dtensor_local(xt))[1] < 2 || !oar_tensor_is_contiguous(oar_dtensor_local(xt)));
        oar_tensor *y = oar_reshard(xt, m, (oar_placement[]){oar_shard(0)});
        CHECK(max_diff(oar_unshard(y), oar_transpose(g2, 0, 1)) == 0);
    }
    /* bf16 moves as bytes */
    check_s2s(m, oar_cast(g3, OAR_BF16), (oar_placement[]){oar_shard(0)}, (oar_placement[]){oar_shard(1)}, 1, 0);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

static void test_all_to_all_2d(void) {
    if (W != 4) return;
    oar_mesh *m = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, NULL);
    int64_t shapes[2][3] = {{4, 6, 2}, {5, 3, 3}};
    for (int s = 0; s < 2; s++) {
        oar_pool *pool = oar_pool_push();
        oar_manual_seed(60 + s);
        oar_tensor *g = oar_randn(OAR_F64, 3, shapes[s]);
        oar_placement R = oar_replicate(), S0 = oar_shard(0), S1 = oar_shard(1), S2 = oar_shard(2);
        check_s2s(m, g, (oar_placement[]){S0, R}, (oar_placement[]){S1, R}, 1, 0);
        check_s2s(m, g, (oar_placement[]){R, S0}, (oar_placement[]){R, S2}, 1, 0);
        check_s2s(m, g, (oar_placement[]){S0, S1}, (oar_placement[]){S2, S1}, 1, 0);
        check_s2s(m, g, (oar_placement[]){S0, S1}, (oar_placement[]){S2, S0}, 2, 0); /* S1 -> S0 once dim 0 is free */
        /* a cycle: one shard is gathered, then one all-to-all, then a slice */
        check_s2s(m, g, (oar_placement[]){S0, S1}, (oar_placement[]){S1, S0}, 1, 1);
        /* a shard going to Replicate is gathered first, freeing dim 1 */
        check_s2s(m, g, (oar_placement[]){S0, S1}, (oar_placement[]){S1, R}, 1, 1);
        oar_pool_pop(pool);
    }
    oar_mesh_release(m);
}

/* ---- gradients: central differences through the dtensor path ------------ */

typedef struct gc_ctx {
    oar_mesh *a, *b;
    oar_placement from[OAR_MESH_MAX_DIMS], to[OAR_MESH_MAX_DIMS];
} gc_ctx;

/* unshard(reshard(shard(x, a, from), b, to) * c) with c fixed: a weight
 * makes each element's gradient differ. */
static oar_tensor *reshard_fn(void *ctx, int n, oar_tensor *const *x) {
    gc_ctx *c = ctx;
    oar_tensor *y = oar_reshard(oar_shard_tensor(x[0], c->a, c->from), c->b, c->to);
    oar_tensor *w = oar_add_scalar(oar_arange(0, (double)oar_tensor_numel(x[0]), 1, OAR_F64), 1.0);
    w = oar_reshape(w, oar_tensor_ndim(x[0]), oar_tensor_shape(x[0]));
    return oar_unshard(oar_mul(oar_square(y), w));
}

static void gradcheck_reshard(const char *name, oar_mesh *a, oar_mesh *b, const oar_placement *from,
                              const oar_placement *to, int64_t rows, int64_t cols) {
    gc_ctx c = {.a = a, .b = b};
    memcpy(c.from, from, sizeof(oar_placement) * (size_t)oar_mesh_ndim(a));
    memcpy(c.to, to, sizeof(oar_placement) * (size_t)oar_mesh_ndim(b));
    gc_input in = {.ndim = 2, .shape = {rows, cols}};
    gradcheck(name, reshard_fn, &c, 1, &in, &(gc_opts){.seed = 5, .contiguous_only = true});
}

static void test_all_to_all_grad(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    gradcheck_reshard("S(0) -> S(1), uneven", m, m, (oar_placement[]){oar_shard(0)},
                      (oar_placement[]){oar_shard(1)}, W + 1, 2 * W - 1 > 0 ? 2 * W - 1 : 1);
    gradcheck_reshard("S(1) -> S(0), even", m, m, (oar_placement[]){oar_shard(1)},
                      (oar_placement[]){oar_shard(0)}, 2 * W, W);
    /* the backward of an all-to-all is the reverse all-to-all, not a gather */
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 3});
    oar_tensor *c = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 3});
    oar_tensor_set_requires_grad(x, true);
    oar_tensor *y = oar_reshard(oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)}), m,
                                (oar_placement[]){oar_shard(1)});
    oar_tensor *seed = oar_shard_tensor(c, m, (oar_placement[]){oar_shard(1)}), *gx = NULL;
    int64_t c0 = oari_dist_calls(OARI_COLL_ALL_TO_ALL), g0 = oari_dist_calls(OARI_COLL_ALL_GATHER);
    CHECK(oar_grad(1, &y, &seed, 1, &x, false, false, &gx) == 0);
    CHECK(oari_dist_calls(OARI_COLL_ALL_TO_ALL) - c0 == 1);
    CHECK(oari_dist_calls(OARI_COLL_ALL_GATHER) - g0 == 1); /* S(0) -> the plain input's gradient */
    CHECK(max_diff(gx, c) == 0);
    oar_pool_pop(pool);
    if (W == 4) {
        oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, NULL);
        gradcheck_reshard("2-D [S(0), S(1)] -> [S(1), S(0)]", m2, m2, (oar_placement[]){oar_shard(0), oar_shard(1)},
                          (oar_placement[]){oar_shard(1), oar_shard(0)}, 5, 3);
        gradcheck_reshard("2-D [S(0), R] -> [S(1), P(sum)]", m2, m2, (oar_placement[]){oar_shard(0), oar_replicate()},
                          (oar_placement[]){oar_shard(1), oar_partial(OAR_REDUCE_SUM)}, 4, 3);
        oar_mesh_release(m2);
    }
    oar_mesh_release(m);
}

/* ---- moves between meshes ------------------------------------------------ */

static bool in_mesh(oar_mesh *m) { return oar_mesh_coord(m, 0) >= 0; }

/* shard(g, a, from) -> move to (b, to): ranks of b get the global value back. */
static void check_move(oar_mesh *a, const oar_placement *from, oar_mesh *b, const oar_placement *to, oar_tensor *g) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_shard_tensor(g, a, from);
    oar_tensor *y = oar_reshard(x, b, to);
    char sa[64], sb[64];
    oar_placements_str(a, from, sa, sizeof sa);
    oar_placements_str(b, to, sb, sizeof sb);
    bool ok = y && oar_dtensor_mesh(y) == b && !memcmp(oar_tensor_shape(y), oar_tensor_shape(g), sizeof(int64_t) * 2);
    if (ok && in_mesh(b)) {
        double err = max_diff(oar_unshard(y), g);
        ok = err == 0 && chunk_shapes(y, g);
    } else if (ok) {
        ok = oar_tensor_numel(oar_dtensor_local(y)) == 0; /* no data outside the mesh */
    }
    if (!ok) fprintf(stderr, "rank %d: move [%s] -> [%s]: %s\n", ME, sa, sb, oar_last_error());
    CHECK(ok);
    oar_pool_pop(pool);
}

static void test_move(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_placement R = oar_replicate(), S0 = oar_shard(0), S1 = oar_shard(1), P = oar_partial(OAR_REDUCE_SUM);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(81);
    oar_tensor *g = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 3});
    /* the same ranks in reverse order */
    int rev[64];
    for (int i = 0; i < W; i++) rev[i] = W - 1 - i;
    oar_mesh *mr = oar_mesh_create(1, (int64_t[]){W}, rev, NULL);
    check_move(m, (oar_placement[]){S0}, mr, (oar_placement[]){S0}, g);
    check_move(m, (oar_placement[]){S0}, mr, (oar_placement[]){S1}, g);
    check_move(m, (oar_placement[]){P}, mr, (oar_placement[]){S0}, g);
    check_move(m, (oar_placement[]){R}, mr, (oar_placement[]){P}, g);
    check_move(mr, (oar_placement[]){oar_partial(OAR_REDUCE_MAX)}, m, (oar_placement[]){R}, g);
    /* with the shards lined up, a rank keeps its data: nothing is sent */
    {
        oar_tensor *x = oar_shard_tensor(g, m, (oar_placement[]){S1});
        int64_t before = oar_dist_bytes_moved();
        oar_mesh *same = oar_mesh_create(1, (int64_t[]){W}, NULL, (const char *const[]){"other"});
        oar_tensor *y = oar_reshard(x, same, (oar_placement[]){S1});
        CHECK(y && oar_dist_bytes_moved() == before && max_diff(oar_unshard(y), g) == 0);
        oar_mesh_release(same);
    }
    oar_mesh_release(mr);
    if (W == 4) {
        /* a 1-D mesh to a 2-D one over the same ranks, and back */
        oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, NULL);
        check_move(m, (oar_placement[]){S0}, m2, (oar_placement[]){S1, S0}, g);
        check_move(m, (oar_placement[]){R}, m2, (oar_placement[]){S0, R}, g);
        check_move(m, (oar_placement[]){P}, m2, (oar_placement[]){S0, S1}, g);
        check_move(m2, (oar_placement[]){S0, S1}, m, (oar_placement[]){S1}, g);
        check_move(m2, (oar_placement[]){P, S0}, m, (oar_placement[]){R}, g);
        /* ranks {0, 1} -> {2, 3}, and overlapping sets {0, 1, 2} -> {1, 2, 3} */
        oar_mesh *lo = oar_mesh_create(1, (int64_t[]){2}, (int[]){0, 1}, NULL);
        oar_mesh *hi = oar_mesh_create(1, (int64_t[]){2}, (int[]){2, 3}, NULL);
        oar_mesh *a3 = oar_mesh_create(1, (int64_t[]){3}, (int[]){0, 1, 2}, NULL);
        oar_mesh *b3 = oar_mesh_create(1, (int64_t[]){3}, (int[]){1, 2, 3}, NULL);
        check_move(lo, (oar_placement[]){S0}, hi, (oar_placement[]){S0}, g);
        check_move(lo, (oar_placement[]){S0}, hi, (oar_placement[]){S1}, g);
        check_move(lo, (oar_placement[]){P}, hi, (oar_placement[]){R}, g);
        check_move(hi, (oar_placement[]){R}, lo, (oar_placement[]){P}, g);
        check_move(a3, (oar_placement[]){S0}, b3, (oar_placement[]){S0}, g);
        check_move(a3, (oar_placement[]){R}, b3, (oar_placement[]){S1}, g);
        check_move(lo, (oar_placement[]){S1}, m2, (oar_placement[]){S0, S1}, g);
        /* bytes: {0, 1} -> {2, 3} with the same even sharding sends each shard once */
        {
            oar_tensor *ge = oar_randn(OAR_F32, 2, (int64_t[]){4, 6});
            oar_tensor *x = oar_shard_tensor(ge, lo, (oar_placement[]){S0});
            int64_t before = oar_dist_bytes_moved();
            oar_tensor *y = oar_reshard(x, hi, (oar_placement[]){S0});
            CHECK(y && oar_dist_bytes_moved() - before == (ME < 2 ? 2 * 6 * 4 : 0));
        }
        /* the gradient of a move is the reverse move: d/dx sum(move(x) * c) = c on the
         * source ranks; ranks outside the source mesh get zeros */
        {
            oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){5, 3});
            oar_tensor *c = oar_randn(OAR_F64, 2, (int64_t[]){5, 3});
            oar_tensor_set_requires_grad(x, true);
            oar_tensor *y = oar_reshard(oar_shard_tensor(x, lo, (oar_placement[]){S0}), hi, (oar_placement[]){S1});
            oar_tensor *seed = oar_shard_tensor(c, hi, (oar_placement[]){S1});
            CHECK(oar_backward(y, seed) == 0);
            oar_tensor *gx = oar_tensor_grad(x);
            CHECK(gx && !oar_tensor_is_dist(gx));
            CHECK(max_diff(gx, ME < 2 ? c : oar_zeros_like(c)) == 0);
            /* outside a mesh: no data to unshard */
            if (ME < 2) CHECK_FAILS(oar_unshard(y), "not in the tensor's mesh");
        }
        /* every rank in the source or target mesh: central differences */
        gradcheck_reshard("move 1-D S(0) -> 2-D [S(1), S(0)]", m, m2, (oar_placement[]){S0},
                          (oar_placement[]){S1, S0}, 5, 3);
        gradcheck_reshard("move 2-D [P, S(1)] -> reversed 1-D R", m2, m, (oar_placement[]){P, S1},
                          (oar_placement[]){R}, 3, 5);
        /* a rank in neither mesh */
        oar_mesh *r0 = oar_mesh_create(1, (int64_t[]){1}, (int[]){0}, NULL);
        oar_mesh *r1 = oar_mesh_create(1, (int64_t[]){1}, (int[]){1}, NULL);
        oar_tensor *x0 = oar_shard_tensor(g, r0, (oar_placement[]){R});
        if (ME >= 2) {
            CHECK_FAILS(oar_reshard(x0, r1, (oar_placement[]){R}), "in neither mesh");
        } else {
            oar_tensor *y = oar_reshard(x0, r1, (oar_placement[]){R});
            CHECK(y && (ME == 0 || max_diff(oar_unshard(y), g) == 0));
        }
        CHECK_FAILS(oar_reshard(x0, r1, (oar_placement[]){oar_shard(2)}), "shards dim 2");
        oar_mesh_release(r0);
        oar_mesh_release(r1);
        oar_mesh_release(lo);
        oar_mesh_release(hi);
        oar_mesh_release(a3);
        oar_mesh_release(b3);
        oar_mesh_release(m2);
    }
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* A move whose sender never comes: the receiver gives up after the
 * timeout with a clear error and both meshes refuse further use; the
 * sender's late call completes the abandoned receive. */
static void test_move_timeout(void) {
    if (W < 2) return;
    oar_mesh *a = oar_mesh_create(1, (int64_t[]){1}, (int[]){0}, NULL);
    oar_mesh *b = oar_mesh_create(1, (int64_t[]){1}, (int[]){1}, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *g = oar_ones(OAR_F32, 2, (int64_t[]){2, 3});
    oar_tensor *x = oar_shard_tensor(g, a, (oar_placement[]){oar_replicate()});
    double old = oar_dist_timeout();
    oar_dist_set_timeout(1.0);
    /* every rank here before the clock starts (an all-gather over the
     * world): a rank arriving late under load must not find the sender */
    oar_mesh *w = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    CHECK(oar_unshard(oar_shard_tensor(oar_ones(OAR_F32, 1, (int64_t[]){W}), w,
                                       (oar_placement[]){oar_shard(0)})) != NULL);
    oar_mesh_release(w);
    if (ME == 1) {
        CHECK_FAILS(oar_reshard(x, b, (oar_placement[]){oar_replicate()}), "did not make the same call");
        CHECK_FAILS(oar_reshard(x, b, (oar_placement[]){oar_replicate()}), "unusable");
    } else if (ME == 0) {
        nanosleep(&(struct timespec){.tv_sec = 3}, NULL); /* 2 s past the receiver's timeout */
        CHECK(oar_reshard(x, b, (oar_placement[]){oar_replicate()}) != NULL);
    }
    oar_dist_set_timeout(old);
    oar_pool_pop(pool);
    oar_mesh_release(a);
    oar_mesh_release(b);
}

/* oar_dist_reducer_new with its Nth allocation failing, for every N:
 * NULL with the error set, nothing leaked; then it succeeds. */
static void test_reducer_alloc_failure(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = oar_shard_tensor(oar_ones(OAR_F32, 1, (int64_t[]){4 + i}), m, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(p[i], true);
    }
    oar_dist_reducer *r = NULL;
    int failures = 0;
    for (long n = 0; n < 100 && !r; n++) {
        long before = live;
        n_calls = 0;
        fail_at = n;
        r = oar_dist_reducer_new(3, p, 8);
        fail_at = -1;
        if (!r) {
            failures++;
            CHECK(live == before);
        }
    }
    CHECK(r && failures >= 10); /* the struct and its ten arrays */
    oar_dist_reducer_free(r);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

int main(int argc, char **argv) {
    oar_set_allocator(failing_alloc, NULL); /* counts blocks; fails only when asked */
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    if (W > 64) return 77;
    RUN(test_all_to_all_1d);
    RUN(test_all_to_all_2d);
    RUN(test_all_to_all_grad);
    RUN(test_move);
    RUN(test_move_timeout);
    RUN(test_reducer_alloc_failure);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

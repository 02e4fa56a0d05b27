/* Distributed tensors: meshes, every reshard pair on 1-D and 2-D meshes
 * with even and uneven splits, sharding rules of pointwise ops, matmul
 * and sum, custom ops, the replicate fallback, and the errors. Every result is checked
 * against the same computation on the global value. Runs on any number of
 * ranks (CTest runs it alone and under mpirun with 2 and 4). */
#include "test.h"
#include <oar/fft.h>

#include <oar/dist.h>
#include <time.h>

static int W, ME;

/* max |a - b| over two plain tensors of one shape (f64 compare). */
static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    if (!oar_tensor_numel(a)) return 0;
    oar_tensor *d = oar_amax(oar_abs(oar_sub(oar_cast(a, OAR_F64), oar_cast(b, OAR_F64))), 0, NULL, false);
    return d ? oar_tensor_item(d) : INFINITY;
}

static bool same_shape(oar_tensor *a, oar_tensor *b) {
    return a && b && oar_tensor_ndim(a) == oar_tensor_ndim(b) &&
           !memcmp(oar_tensor_shape(a), oar_tensor_shape(b), sizeof(int64_t) * (size_t)oar_tensor_ndim(a));
}

static void test_mesh(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    CHECK(m && oar_mesh_ndim(m) == 1 && oar_mesh_shape(m)[0] == W);
    CHECK(oar_mesh_coord(m, 0) == ME);
    CHECK(oar_mesh_coord(m, 1) == -1);
    CHECK(m && !strcmp(oar_mesh_dim_name(m, 0), "d0"));
    oar_mesh_release(m);
    oar_mesh *named = oar_mesh_create(2, (int64_t[]){1, W}, NULL, (const char *const[]){"dp", "tp"});
    CHECK(named && !strcmp(oar_mesh_dim_name(named, 1), "tp") && oar_mesh_coord(named, 1) == ME);
    oar_mesh_release(named);
    CHECK_FAILS(oar_mesh_create(0, (int64_t[]){1}, NULL, NULL), "ndim");
    CHECK_FAILS(oar_mesh_create(1, (int64_t[]){W + 1}, NULL, NULL), "oar_mesh_create");
    CHECK_FAILS(oar_mesh_create(1, NULL, NULL, NULL), "oar_mesh_create");
    if (W >= 2) CHECK_FAILS(oar_mesh_create(1, (int64_t[]){2}, (int[]){0, 0}, NULL), "repeated");
    CHECK_FAILS(oar_mesh_create(1, (int64_t[]){1}, (int[]){W}, NULL), "out of range");
    char buf[64];
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){W, 1}, NULL, NULL);
    oar_placements_str(m2, (oar_placement[]){oar_shard(1), oar_partial(OAR_REDUCE_MAX)}, buf, sizeof buf);
    CHECK(!strcmp(buf, "S(1), P(max)"));
    oar_mesh_release(m2);
}

/* shard -> reshard -> unshard gives back the global value, for every pair. */
static void check_pairs(oar_mesh *m, oar_tensor *g, int n, const oar_placement (*set)[OAR_MESH_MAX_DIMS]) {
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            oar_pool *pool = oar_pool_push();
            oar_tensor *x = oar_shard_tensor(g, m, set[a]);
            oar_tensor *y = oar_reshard(x, m, set[b]);
            oar_tensor *back = oar_unshard(y);
            double err = max_diff(back, g);
            if (err > 1e-12) {
                char sa[64], sb[64];
                fprintf(stderr, "rank %d: [%s] -> [%s] on %lld x %lld: error %g (%s)\n", ME,
                        oar_placements_str(m, set[a], sa, sizeof sa),
                        oar_placements_str(m, set[b], sb, sizeof sb), (long long)oar_tensor_shape(g)[0],
                        (long long)oar_tensor_shape(g)[1], err, oar_last_error());
            }
            CHECK(err <= 1e-12);
            /* The shard has the chunk extent torch.chunk would give. */
            const oar_placement *p = y ? oar_dtensor_placements(y) : NULL;
            oar_tensor *loc = y ? oar_dtensor_local(y) : NULL;
            bool shape_ok = p && loc;
            for (int d = 0; shape_ok && d < oar_mesh_ndim(m); d++) {
                if (p[d].kind != OAR_PLACEMENT_SHARD) continue;
                int64_t n_all = oar_tensor_shape(g)[p[d].dim], size = (n_all + oar_mesh_shape(m)[d] - 1) / oar_mesh_shape(m)[d];
                int64_t s = oar_mesh_coord(m, d) * size, e = s + size;
                if (s > n_all) s = n_all;
                if (e > n_all) e = n_all;
                shape_ok = oar_tensor_shape(loc)[p[d].dim] == e - s;
            }
            CHECK(shape_ok);
            oar_pool_pop(pool);
        }
}

static void test_reshard_1d(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    const oar_placement set[][OAR_MESH_MAX_DIMS] = {
        {oar_shard(0)}, {oar_shard(1)}, {oar_replicate()}, {oar_partial(OAR_REDUCE_SUM)},
        {oar_partial(OAR_REDUCE_MAX)}, {oar_partial(OAR_REDUCE_AVG)},
    };
    int64_t shapes[3][2] = {{2 * W, 4}, {2 * W + 1, 3}, {1, 5}}; /* even, uneven, fewer rows than ranks */
    for (int s = 0; s < 3; s++) {
        oar_pool *pool = oar_pool_push();
        oar_manual_seed(7 + s);
        oar_tensor *g = oar_randn(OAR_F64, 2, shapes[s]);
        check_pairs(m, g, 6, set);
        oar_pool_pop(pool);
    }
    oar_mesh_release(m);
}

static void test_reshard_2d(void) {
    if (W != 4) return;
    oar_mesh *m = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, NULL);
    const oar_placement set[][OAR_MESH_MAX_DIMS] = {
        {oar_shard(0), oar_shard(1)}, {oar_shard(1), oar_shard(0)}, {oar_replicate(), oar_shard(0)},
        {oar_shard(0), oar_replicate()}, {oar_partial(OAR_REDUCE_SUM), oar_shard(1)},
        {oar_replicate(), oar_replicate()}, {oar_partial(OAR_REDUCE_SUM), oar_partial(OAR_REDUCE_SUM)},
        {oar_shard(1), oar_partial(OAR_REDUCE_SUM)},
    };
    int64_t shapes[2][2] = {{4, 6}, {5, 3}};
    for (int s = 0; s < 2; s++) {
        oar_pool *pool = oar_pool_push();
        oar_manual_seed(11 + s);
        oar_tensor *g = oar_randn(OAR_F64, 2, shapes[s]);
        check_pairs(m, g, 8, set);
        oar_pool_pop(pool);
    }
    oar_mesh_release(m);
}

/* A Partial(sum) dtensor built from local parts that sum to g. */
static void test_from_local(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(3);
    oar_tensor *g = oar_randn(OAR_F64, 2, (int64_t[]){3, 4});
    double share = (ME + 1) / (W * (W + 1) / 2.0);
    oar_tensor *part = oar_dtensor_from_local(oar_mul_scalar(g, share), m,
                                              (oar_placement[]){oar_partial(OAR_REDUCE_SUM)}, NULL);
    CHECK(max_diff(oar_unshard(part), g) < 1e-12);
    /* Uneven shards: global size inferred by summing the local sizes. */
    int64_t rows = 2 * W + 1, start = ME * 3 < rows ? ME * 3 : rows, len = start + 3 < rows ? 3 : rows - start;
    oar_tensor *big = oar_randn(OAR_F64, 2, (int64_t[]){rows, 2});
    oar_tensor *mine = oar_slice(big, 0, start, start + len, 1);
    oar_tensor *d = oar_dtensor_from_local(mine, m, (oar_placement[]){oar_shard(0)}, NULL);
    CHECK(d && oar_tensor_shape(d)[0] == rows);
    CHECK(max_diff(oar_unshard(d), big) == 0);
    oar_tensor *d2 = oar_dtensor_from_local(mine, m, (oar_placement[]){oar_shard(0)}, (int64_t[]){rows, 2});
    CHECK(max_diff(oar_unshard(d2), big) == 0);
    CHECK_FAILS(oar_dtensor_from_local(mine, m, (oar_placement[]){oar_shard(0)}, (int64_t[]){rows + W * 3, 2}),
                "does not match");
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* op on dtensors vs the op on global values; returns the result dtensor. */
static oar_tensor *check_op(oar_tensor *dist_result, oar_tensor *global_result, const char *what) {
    oar_tensor *u = oar_unshard(dist_result);
    double err = max_diff(u, global_result);
    if (!(err < 1e-12) || !same_shape(u, global_result))
        fprintf(stderr, "rank %d: %s: error %g (%s)\n", ME, what, err, oar_last_error());
    CHECK(err < 1e-12 && same_shape(u, global_result));
    return dist_result;
}

static oar_placement placement0(oar_tensor *t) {
    const oar_placement *p = oar_dtensor_placements(t);
    return p ? p[0] : (oar_placement){.kind = -1};
}

/* Rank r's values for the broadcast tests: 2 x 3, element i = 10 r + i. */
static oar_tensor *rank_values(int r, oar_dtype dtype) {
    double v[6];
    for (int i = 0; i < 6; i++) v[i] = 10.0 * r + i;
    return oar_cast(oar_tensor_from_data(v, OAR_F64, 2, (int64_t[]){2, 3}), dtype);
}

/* oar_dist_broadcast_: every rank of a group ends with the root member's
 * values (1-D mesh with the last rank as root; a 2-D mesh along dim 1 and
 * along dim 0, each group from its own root), in place, in f32, f64 and
 * int64, into a contiguous slice without touching its neighbours, onto a
 * leaf that requires grad (its version moves, so a value saved before it
 * is refused by backward), with its payload counted; then the errors. */
static void test_broadcast(void) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    const oar_dtype dtypes[3] = {OAR_F32, OAR_F64, OAR_I64};
    for (int k = 0; k < 3; k++) {
        oar_tensor *t = oar_contiguous(rank_values(ME, dtypes[k]));
        int64_t before = oar_dist_bytes_moved();
        CHECK(oar_dist_broadcast_(t, m, 0, W - 1) == 0);
        CHECK(max_diff(t, rank_values(W - 1, dtypes[k])) == 0);
        CHECK(oar_dist_bytes_moved() - before == 6 * (int64_t)oar_dtype_size(dtypes[k]));
    }
    /* 2-D: groups along dim 1 are the rows of the mesh, along dim 0 its columns */
    int64_t s1 = W % 2 ? 1 : 2, s0 = W / s1;
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){s0, s1}, NULL, NULL);
    oar_tensor *t = oar_contiguous(rank_values(ME, OAR_F64));
    CHECK(oar_dist_broadcast_(t, m2, 1, (int)s1 - 1) == 0);
    int row_root = ME / (int)s1 * (int)s1 + (int)s1 - 1;
    CHECK(max_diff(t, rank_values(row_root, OAR_F64)) == 0);
    CHECK(oar_dist_broadcast_(t, m2, 0, (int)s0 - 1) == 0);
    CHECK(max_diff(t, rank_values((int)(s0 - 1) * (int)s1 + (int)s1 - 1, OAR_F64)) == 0);
    /* a slice (rows 1..2 of 4): the rows around it keep this rank's values */
    oar_tensor *big = oar_arange(0, 12, 1, OAR_F32);
    big = oar_add_scalar(oar_reshape(big, 2, (int64_t[]){4, 3}), 100.0 * ME);
    oar_tensor *keep = oar_clone(big);
    CHECK(oar_dist_broadcast_(oar_slice(big, 0, 1, 3, 1), m, 0, 0) == 0);
    CHECK(max_diff(oar_slice(big, 0, 1, 3, 1), oar_slice(oar_sub_scalar(keep, 100.0 * ME), 0, 1, 3, 1)) == 0);
    CHECK(max_diff(oar_slice(big, 0, 0, 1, 1), oar_slice(keep, 0, 0, 1, 1)) == 0);
    CHECK(max_diff(oar_slice(big, 0, 3, 4, 1), oar_slice(keep, 0, 3, 4, 1)) == 0);
    /* a parameter: allowed; a value saved for backward before it is refused */
    oar_tensor *w = oar_contiguous(rank_values(ME, OAR_F64));
    CHECK(oar_tensor_set_requires_grad(w, true) == 0);
    oar_tensor *loss = oar_sum(oar_mul(w, w), 0, NULL, false);
    CHECK(oar_dist_broadcast_(w, m, 0, 0) == 0);
    CHECK(max_diff(w, rank_values(0, OAR_F64)) == 0);
    if (ME == 0) CHECK(oar_backward(loss, NULL) == 0); /* the root's values did not change */
    else CHECK_STATUS_FAILS(oar_backward(loss, NULL), "modified by an in-place operation");
    /* errors */
    oar_tensor *x = oar_contiguous(rank_values(ME, OAR_F32));
    CHECK_STATUS_FAILS(oar_dist_broadcast_(NULL, m, 0, 0), "the tensor is NULL");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(x, NULL, 0, 0), "the mesh is NULL");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(oar_shard_tensor(x, m, (oar_placement[]){oar_replicate()}), m, 0, 0),
                       "oar_dtensor_local");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(oar_transpose(x, 0, 1), m, 0, 0), "[3, 2] is not contiguous");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(x, m, 1, 0), "mesh dim 1 of a 1-d mesh");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(x, m, -1, 0), "mesh dim -1");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(x, m, 0, W), "root");
    CHECK_STATUS_FAILS(oar_dist_broadcast_(x, m, 0, -1), "root -1");
    oar_mesh *first = oar_mesh_create(1, (int64_t[]){1}, (int[]){0}, NULL);
    if (ME > 0) CHECK_STATUS_FAILS(oar_dist_broadcast_(x, first, 0, 0), "not in the mesh");
    else CHECK(oar_dist_broadcast_(x, first, 0, 0) == 0); /* a group of one: nothing changes */
    CHECK(max_diff(x, rank_values(ME, OAR_F32)) == 0);
    oar_mesh_release(first);
    oar_mesh_release(m2);
    oar_mesh_release(m);
    oar_pool_pop(pool);
}

static void test_ops(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(5);
    int64_t rows = 2 * W + 1;
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){rows, 6});
    oar_tensor *y = oar_randn(OAR_F64, 1, (int64_t[]){6});
    oar_tensor *w = oar_randn(OAR_F64, 2, (int64_t[]){6, 3});
    oar_tensor *xs0 = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
    oar_tensor *xs1 = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(1)});
    oar_tensor *xp = oar_shard_tensor(x, m, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)});
    oar_tensor *ws1 = oar_shard_tensor(w, m, (oar_placement[]){oar_shard(1)});

    /* pointwise: a sharded dim follows through; a broadcast plain tensor is replicated */
    oar_tensor *r = check_op(oar_add(xs0, y), oar_add(x, y), "add S(0) + plain");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_exp(xs1), oar_exp(x), "exp S(1)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1);
    r = check_op(oar_mul(xs0, xs1), oar_mul(x, x), "mul S(0) * S(1)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_add(xp, xp), oar_add(x, x), "add P + P");
    CHECK(placement0(r).kind == OAR_PLACEMENT_PARTIAL);
    r = check_op(oar_mul(xp, y), oar_mul(x, y), "mul P * plain");
    CHECK(placement0(r).kind == OAR_PLACEMENT_PARTIAL);
    r = check_op(oar_exp(xp), oar_exp(x), "exp P (reduced first)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);

    /* matmul: row-sharded, contraction-sharded (partial), column-sharded */
    r = check_op(oar_matmul(xs0, w), oar_matmul(x, w), "matmul S(0) @ plain");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_matmul(xs1, w), oar_matmul(x, w), "matmul S(1) @ plain");
    CHECK(placement0(r).kind == (W > 1 ? OAR_PLACEMENT_PARTIAL : OAR_PLACEMENT_PARTIAL));
    r = check_op(oar_matmul(x, ws1), oar_matmul(x, w), "matmul plain @ S(1)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1);
    r = check_op(oar_matmul(xp, w), oar_matmul(x, w), "matmul P @ plain");
    CHECK(placement0(r).kind == OAR_PLACEMENT_PARTIAL);
    oar_tensor *b3 = oar_randn(OAR_F64, 3, (int64_t[]){rows, 2, 6});
    oar_tensor *b3s = oar_shard_tensor(b3, m, (oar_placement[]){oar_shard(0)});
    r = check_op(oar_matmul(b3s, w), oar_matmul(b3, w), "batched matmul S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);

    /* sum: over the sharded dim gives a partial sum */
    r = check_op(oar_sum(xs0, 1, (int64_t[]){0}, false), oar_sum(x, 1, (int64_t[]){0}, false), "sum S(0) dim 0");
    CHECK(placement0(r).kind == OAR_PLACEMENT_PARTIAL);
    r = check_op(oar_sum(xs1, 1, (int64_t[]){0}, false), oar_sum(x, 1, (int64_t[]){0}, false), "sum S(1) dim 0");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_sum(xs1, 0, NULL, true), oar_sum(x, 0, NULL, true), "sum all keepdim");

    /* movement and row-wise ops: a sharded dim that passes through whole stays sharded */
    int64_t before = oar_dist_fallback_count();
    r = check_op(oar_transpose(xs0, 0, 1), oar_transpose(x, 0, 1), "transpose S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1);
    r = check_op(oar_reshape(xs0, 3, (int64_t[]){rows, 2, 3}), oar_reshape(x, 3, (int64_t[]){rows, 2, 3}), "reshape S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_reshape(oar_transpose(xs0, 0, 1), 2, (int64_t[]){2, 3 * rows}),
                 oar_reshape(oar_transpose(x, 0, 1), 2, (int64_t[]){2, 3 * rows}), "reshape of a transposed S(0)");
    /* merging a sharded dim with the dims after it: sharded like it when it
     * splits evenly (no bytes move), else replicated first (rows = 2W + 1) */
    {
        oar_tensor *x3 = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 3, 2});
        oar_tensor *x3s = oar_shard_tensor(x3, m, (oar_placement[]){oar_shard(0)});
        int64_t moved = oar_dist_bytes_moved();
        oar_tensor *merged = oar_reshape(x3s, 2, (int64_t[]){-1, 2});
        CHECK(oar_dist_bytes_moved() == moved);
        r = check_op(merged, oar_reshape(x3, 2, (int64_t[]){-1, 2}), "reshape merging S(0), even");
        CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
        CHECK(oar_tensor_dim(oar_dtensor_local(merged), 0) == 2 * 3);
        r = check_op(oar_reshape(xs0, 1, (int64_t[]){6 * rows}), oar_reshape(x, 1, (int64_t[]){6 * rows}),
                     "reshape merging S(0), uneven");
        if (W > 1) CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);
    }
    r = check_op(oar_reshape(xp, 1, (int64_t[]){6 * rows}), oar_reshape(x, 1, (int64_t[]){6 * rows}), "reshape P");
    CHECK(placement0(r).kind == OAR_PLACEMENT_PARTIAL);
    r = check_op(oar_expand(oar_unsqueeze(xs0, 0), 3, (int64_t[]){3, rows, 6}),
                 oar_expand(oar_unsqueeze(x, 0), 3, (int64_t[]){3, rows, 6}), "expand S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1);
    r = check_op(oar_slice(xs0, 1, 1, 5, 2), oar_slice(x, 1, 1, 5, 2), "slice an unsharded dim");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_slice(xs0, 0, 1, rows, 3), oar_slice(x, 0, 1, rows, 3), "slice the sharded dim");
    CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);
    r = check_op(oar_softmax(xs0, 1), oar_softmax(x, 1), "softmax S(0) over dim 1");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_log_softmax(xs1, 1), oar_log_softmax(x, 1), "log_softmax S(1) over dim 1");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1); /* rules_vocab.c */
    /* Linear's forward, x @ w^T, with w sharded by output features (colwise) */
    oar_tensor *wt = oar_randn(OAR_F64, 2, (int64_t[]){4, 6});
    oar_tensor *wts = oar_shard_tensor(wt, m, (oar_placement[]){oar_shard(0)});
    r = check_op(oar_matmul(x, oar_transpose(wts, 0, 1)), oar_matmul(x, oar_transpose(wt, 0, 1)), "colwise linear");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 1);
    CHECK(oar_dist_fallback_count() == before);

    /* layer_norm over the last dim keeps a row sharding; index_select follows a sharded index */
    before = oar_dist_fallback_count();
    oar_tensor *lw = oar_randn(OAR_F64, 1, (int64_t[]){6}), *lb = oar_randn(OAR_F64, 1, (int64_t[]){6});
    r = check_op(oar_layer_norm(xs0, 1, lw, lb, 1e-5), oar_layer_norm(x, 1, lw, lb, 1e-5), "layer_norm S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    r = check_op(oar_layer_norm(xs1, 1, lw, lb, 1e-5), oar_layer_norm(x, 1, lw, lb, 1e-5), "layer_norm S(1)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);
    int64_t ids[7] = {0, 2, 1, 2, 0, 1, 2};
    oar_tensor *idx = oar_tensor_from_data(ids, OAR_I64, 1, (int64_t[]){7});
    oar_tensor *idxs = oar_shard_tensor(idx, m, (oar_placement[]){oar_shard(0)});
    oar_tensor *table = oar_randn(OAR_F64, 2, (int64_t[]){3, 4});
    r = check_op(oar_embedding(table, idxs), oar_embedding(table, idx), "embedding with sharded ids");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    CHECK(oar_dist_fallback_count() == before);

    /* no rule (replicate by design, src/dist/rules_table.c): the inputs are replicated and the op runs whole */
    r = check_op(oar_diagonal(xs0, 0, 0, 1), oar_diagonal(x, 0, 0, 1), "diagonal fallback");
    CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);
    CHECK(oar_dist_fallback_count() == before + 1);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

static void test_errors(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){W, 1}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_ones(OAR_F32, 2, (int64_t[]){4, 3});
    oar_tensor *xd = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
    CHECK_FAILS(oar_shard_tensor(x, m, (oar_placement[]){oar_shard(2)}), "shards dim 2");
    CHECK_FAILS(oar_shard_tensor(x, m2, (oar_placement[]){oar_shard(0), oar_shard(0)}), "two mesh dims");
    CHECK_FAILS(oar_shard_tensor(x, m, (oar_placement[]){{.kind = 9}}), "unknown placement");
    CHECK_FAILS(oar_shard_tensor(xd, m, (oar_placement[]){oar_shard(0)}), "already distributed");
    CHECK_FAILS(oar_shard_tensor(NULL, m, (oar_placement[]){oar_shard(0)}), "NULL");
    CHECK_FAILS(oar_shard_tensor(x, NULL, NULL), "NULL");
    CHECK_FAILS(oar_unshard(x), "not distributed");
    CHECK(oar_dtensor_mesh(xd) == m && oar_tensor_is_dist(xd) && !oar_tensor_is_dist(x));
    CHECK_FAILS(oar_dtensor_mesh(x), "not distributed");
    CHECK_FAILS(oar_dtensor_placements(NULL), "NULL");
    /* collectives count the payload each rank hands them: its f32 shard */
    int64_t moved = oar_dist_bytes_moved();
    CHECK(oar_unshard(xd) != NULL && oar_dist_bytes_moved() - moved == oar_tensor_numel(oar_dtensor_local(xd)) * 4);
    CHECK_FAILS(oar_dtensor_local(x), "not distributed");
    /* another mesh over the same ranks: a move (tests/dist/test_dist_reshard.c) */
    CHECK(max_diff(oar_unshard(oar_reshard(xd, m2, (oar_placement[]){oar_replicate(), oar_replicate()})), x) == 0);
    float buf[12];
    CHECK_STATUS_FAILS(oar_tensor_to_host(xd, buf, sizeof buf), "distributed");
    oar_tensor *xi = oar_shard_tensor(oar_ones(OAR_I64, 1, (int64_t[]){4}), m,
                                      (oar_placement[]){oar_partial(OAR_REDUCE_AVG)});
    if (W > 1) CHECK_FAILS(oar_unshard(xi), "avg is not defined for dtype int64");
    oar_tensor *ad = oar_shard_tensor(x, m2, (oar_placement[]){oar_shard(0), oar_replicate()});
    CHECK_FAILS(oar_add(xd, ad), "different meshes");
    /* in-place writes keep the target's placements; a Partial target is refused */
    CHECK(oar_fill_(xd, 2.0) == 0 && max_diff(oar_unshard(xd), oar_full(OAR_F32, 2, (int64_t[]){4, 3}, 2.0)) == 0);
    oar_tensor *src = oar_randn(OAR_F32, 1, (int64_t[]){3});
    CHECK(oar_copy_(xd, src) == 0 && max_diff(oar_unshard(xd), oar_expand(src, 2, (int64_t[]){4, 3})) == 0);
    /* add_scaled_ (an optimizer's update) from a Partial source (reduced
     * first) and from a plain one */
    oar_tensor *g = oar_randn(OAR_F32, 2, (int64_t[]){4, 3}), *before = oar_unshard(xd);
    CHECK(oar_add_scaled_(xd, oar_shard_tensor(g, m, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)}), -0.5) == 0);
    CHECK(max_diff(oar_unshard(xd), oar_add(before, oar_mul_scalar(g, -0.5))) < 1e-6);
    CHECK(oar_add_scaled_(xd, src, 2.0) == 0);
    CHECK(max_diff(oar_unshard(xd), oar_add(oar_add(before, oar_mul_scalar(g, -0.5)), oar_mul_scalar(src, 2.0))) < 1e-6);
    CHECK(oar_dtensor_placements(xd) && oar_dtensor_placements(xd)[0].kind == OAR_PLACEMENT_SHARD);
    oar_tensor *xpart = oar_shard_tensor(x, m, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)});
    CHECK_STATUS_FAILS(oar_fill_(xpart, 1.0), "Partial");
    CHECK_STATUS_FAILS(oar_copy_(x, xd), "the target must be the dtensor");
    oar_pool_pop(pool);
    oar_mesh_release(m);
    oar_mesh_release(m2);
}

/* The Megatron MLP: y = gelu(x @ w1) @ w2 + b with w1 column-sharded, w2
 * row-sharded, b replicated, x sharded by rows or plain; loss sum(tanh(y)).
 * Returns the loss; leaves[] get the gradients through oar_backward. */
static oar_tensor *mlp_loss(oar_tensor *x, oar_tensor *w1, oar_tensor *w2, oar_tensor *b) {
    return oar_sum(oar_tanh(oar_add(oar_matmul(oar_gelu(oar_matmul(x, w1), false), w2), b)), 0, NULL, false);
}

static void test_autograd(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(21);
    int64_t rows = 2 * W + 1;
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){rows, 6});
    oar_tensor *w1 = oar_randn(OAR_F64, 2, (int64_t[]){6, 8});
    oar_tensor *w2 = oar_randn(OAR_F64, 2, (int64_t[]){8, 5});
    oar_tensor *b = oar_randn(OAR_F64, 1, (int64_t[]){5});
    /* the reference: plain tensors, one process */
    oar_tensor *pw[3] = {oar_clone(w1), oar_clone(w2), oar_clone(b)};
    for (int i = 0; i < 3; i++) oar_tensor_set_requires_grad(pw[i], true);
    oar_tensor *ref = mlp_loss(x, pw[0], pw[1], pw[2]);
    CHECK(oar_backward(ref, NULL) == 0);

    const oar_placement xs[2][OAR_MESH_MAX_DIMS] = {{oar_replicate()}, {oar_shard(0)}};
    for (int v = 0; v < 2; v++) {
        oar_tensor *dw[3] = {
            oar_shard_tensor(w1, m, (oar_placement[]){oar_shard(1)}),
            oar_shard_tensor(w2, m, (oar_placement[]){oar_shard(0)}),
            oar_shard_tensor(b, m, (oar_placement[]){oar_replicate()}),
        };
        for (int i = 0; i < 3; i++) CHECK(oar_tensor_set_requires_grad(dw[i], true) == 0);
        oar_tensor *dx = oar_shard_tensor(x, m, xs[v]);
        oar_tensor *loss = mlp_loss(dx, dw[0], dw[1], dw[2]);
        CHECK(loss && oar_tensor_is_dist(loss));
        CHECK_NEAR(oar_tensor_item(oar_unshard(loss)), oar_tensor_item(ref), 1e-10);
        CHECK(oar_backward(loss, NULL) == 0);
        for (int i = 0; i < 3; i++) {
            oar_tensor *g = oar_tensor_grad(dw[i]);
            CHECK(g && oar_tensor_is_dist(g));
            double err = max_diff(oar_unshard(g), oar_tensor_grad(pw[i]));
            if (!(err < 1e-10)) fprintf(stderr, "rank %d: x %s: grad %d error %g\n", ME, v ? "S(0)" : "R", i, err);
            CHECK(err < 1e-10);
        }
    }

    /* data parallel: a replicated weight used with row-sharded data */
    {
        oar_tensor *dw = oar_shard_tensor(w1, m, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(dw, true);
        oar_tensor *dx = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
        oar_tensor *loss = oar_sum(oar_square(oar_matmul(dx, dw)), 0, NULL, false);
        CHECK(oar_backward(loss, NULL) == 0);
        oar_tensor *pw1 = oar_clone(w1);
        oar_tensor_set_requires_grad(pw1, true);
        oar_backward(oar_sum(oar_square(oar_matmul(x, pw1)), 0, NULL, false), NULL);
        CHECK(max_diff(oar_unshard(oar_tensor_grad(dw)), oar_tensor_grad(pw1)) < 1e-10);
    }
    /* the same on [batch, seq, k] data (a linear layer in a transformer):
     * backward moves no bytes, the weight's gradient stays Partial (an
     * all-gather of the activations here made DP 5x the minimum traffic) */
    {
        oar_tensor *x3 = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 3, 6});
        oar_tensor *dw = oar_shard_tensor(w1, m, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(dw, true);
        oar_tensor *dx = oar_shard_tensor(x3, m, (oar_placement[]){oar_shard(0)});
        oar_tensor *loss = oar_sum(oar_square(oar_matmul(dx, dw)), 0, NULL, false);
        int64_t before = oar_dist_bytes_moved();
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_dist_bytes_moved() == before);
        oar_tensor *pw1 = oar_clone(w1);
        oar_tensor_set_requires_grad(pw1, true);
        oar_backward(oar_sum(oar_square(oar_matmul(x3, pw1)), 0, NULL, false), NULL);
        CHECK(max_diff(oar_unshard(oar_tensor_grad(dw)), oar_tensor_grad(pw1)) < 1e-10);
    }

    /* second order: a Hessian-vector product through dtensors */
    {
        oar_tensor *dw = oar_shard_tensor(w1, m, (oar_placement[]){oar_shard(1)});
        oar_tensor_set_requires_grad(dw, true);
        oar_tensor *dx = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
        oar_tensor *vec = oar_randn(OAR_F64, 2, (int64_t[]){6, 8});
        oar_tensor *g = NULL, *hv = NULL;
        oar_tensor *loss = oar_sum(oar_tanh(oar_matmul(dx, dw)), 0, NULL, false);
        CHECK(oar_grad(1, &loss, NULL, 1, &dw, true, false, &g) == 0);
        oar_tensor *gv = oar_sum(oar_mul(g, vec), 0, NULL, false);
        CHECK(oar_grad(1, &gv, NULL, 1, &dw, false, false, &hv) == 0);

        oar_tensor *pw1 = oar_clone(w1), *pg = NULL, *phv = NULL;
        oar_tensor_set_requires_grad(pw1, true);
        oar_tensor *ploss = oar_sum(oar_tanh(oar_matmul(x, pw1)), 0, NULL, false);
        oar_grad(1, &ploss, NULL, 1, &pw1, true, false, &pg);
        oar_tensor *pgv = oar_sum(oar_mul(pg, vec), 0, NULL, false);
        oar_grad(1, &pgv, NULL, 1, &pw1, false, false, &phv);
        CHECK(max_diff(oar_unshard(g), pg) < 1e-10);
        CHECK(max_diff(oar_unshard(hv), phv) < 1e-10);
    }

    /* the gradient of a slice (slice_backward) keeps the row sharding, with no fallback */
    {
        int64_t before = oar_dist_fallback_count();
        oar_tensor *dw = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
        oar_tensor_set_requires_grad(dw, true);
        oar_tensor *loss = oar_sum(oar_square(oar_slice(dw, 1, 1, 5, 2)), 0, NULL, false);
        CHECK(oar_backward(loss, NULL) == 0);
        oar_tensor *pw = oar_clone(x);
        oar_tensor_set_requires_grad(pw, true);
        oar_backward(oar_sum(oar_square(oar_slice(pw, 1, 1, 5, 2)), 0, NULL, false), NULL);
        CHECK(max_diff(oar_unshard(oar_tensor_grad(dw)), oar_tensor_grad(pw)) < 1e-12);
        CHECK(placement0(oar_tensor_grad(dw)).kind == OAR_PLACEMENT_SHARD);
        CHECK(oar_dist_fallback_count() == before);
    }

    /* gradients flow through shard/unshard back to a plain tensor */
    {
        oar_tensor *px = oar_clone(x);
        oar_tensor_set_requires_grad(px, true);
        oar_tensor *dx = oar_shard_tensor(px, m, (oar_placement[]){oar_shard(1)});
        oar_tensor *loss = oar_sum(oar_unshard(oar_mul(dx, dx)), 0, NULL, false);
        CHECK(loss && !oar_tensor_is_dist(loss));
        CHECK(oar_backward(loss, NULL) == 0);
        oar_tensor *g = oar_tensor_grad(px);
        CHECK(g && !oar_tensor_is_dist(g));
        CHECK(max_diff(g, oar_mul_scalar(x, 2)) < 1e-12);
    }
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* ---- training recipes: data, tensor and 2-D parallel against one process ---- */

static oar_module *make_mlp(void) {
    oar_manual_seed(99); /* every rank and the reference start alike */
    oar_module *mods[3] = {oar_linear_new(6, 16, true), oar_tanh_new(), oar_linear_new(16, 3, true)};
    return oar_sequential_new(3, mods);
}

/* Trains 5 SGD steps on (x, y); loss[] gets each step's loss. dp_mesh_dim
 * >= 0 shards the batch over that mesh dim; rules lay out the weights over
 * tp_mesh_dim. mesh NULL: plain tensors in one process. */
static oar_module *make_transformer(void) {
    oar_manual_seed(77);
    oar_transformer_options o = {.dim_feedforward = 16, .norm_first = true, .causal = true,
                                 .activation = OAR_ACTIVATION_GELU, .dtype = OAR_F64};
    return oar_transformer_encoder_layer_new(8, 2, &o);
}

static oar_module *(*make_model)(void) = make_mlp;

/* > 0: gradients reduced by an oar_dist_reducer with buckets of this many
 * bytes (overlapped with backward); reducer_overlapped gets the buckets
 * started during backward, summed over the steps */
static size_t reducer_bucket;
static int reducer_overlapped;

static void train(oar_mesh *mesh, int dp_mesh_dim, int tp_mesh_dim, int n_rules,
                  const oar_parallel_rule *rules, oar_tensor *x, oar_tensor *y, double *loss, int *calls) {
    oar_module *mlp = make_model();
    if (mesh) CHECK(oar_parallelize(mlp, mesh, tp_mesh_dim, n_rules, rules) == 0);
    oar_tensor *params[32];
    int np = oar_module_parameters(mlp, params, 32);
    oar_dist_reducer *red = mesh && reducer_bucket ? oar_dist_reducer_new(np, params, reducer_bucket) : NULL;
    CHECK(!(mesh && reducer_bucket) || red);
    reducer_overlapped = 0;
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    CHECK(opt != NULL);
    oar_tensor *xb = x, *yb = y;
    oar_pool *outer = oar_pool_push();
    if (mesh && dp_mesh_dim >= 0) {
        oar_placement p[OAR_MESH_MAX_DIMS] = {oar_replicate(), oar_replicate()};
        p[dp_mesh_dim] = oar_shard(0);
        xb = oar_shard_tensor(x, mesh, p);
        yb = oar_shard_tensor(y, mesh, p);
    }
    for (int step = 0; step < 5; step++) {
        oar_pool *pool = oar_pool_push();
        oar_optim_zero_grad(opt);
        oar_tensor *d = oar_sub(oar_module_forward(mlp, xb), yb);
        oar_tensor *l = oar_mul_scalar(oar_sum(oar_square(d), 0, NULL, false), 1.0 / (double)oar_tensor_numel(y));
        CHECK(oar_backward(l, NULL) == 0);
        if (mesh) {
            int c = red ? oar_dist_reducer_wait(red) : oar_dist_reduce_grads(np, params, 0);
            CHECK(c >= 0);
            if (calls) *calls += c;
            reducer_overlapped += oar_dist_reducer_overlapped(red);
        }
        CHECK(oar_optim_step(opt) == 0);
        loss[step] = oar_tensor_item(mesh ? oar_unshard(l) : l);
        oar_pool_pop(pool);
    }
    oar_pool_pop(outer);
    oar_dist_reducer_free(red);
    oar_optim_free(opt);
    oar_module_free(mlp);
}

static double curve_tol = 1e-5; /* f32; f64 models use 1e-10 */

static void check_curve(const char *what, const double *got, const double *want) {
    for (int i = 0; i < 5; i++) {
        double rel = fabs(got[i] - want[i]) / fabs(want[i]);
        if (!(rel < curve_tol)) fprintf(stderr, "rank %d: %s step %d: loss %.17g, one process %.17g\n", ME, what, i, got[i], want[i]);
        CHECK(rel < curve_tol);
    }
    CHECK(want[4] < want[0]); /* it trains */
}

/* A checkpointed segment on dtensors: out[0] = gelu(x @ w1) @ w2. */
static int mlp_segment(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_matmul(oar_gelu(oar_matmul(in[0], in[1]), false), in[2]);
    return out[0] ? 0 : -1;
}

/* oar_detach of a dtensor is a dtensor on the same shard (it used to be a
 * tensor without data), so oar_checkpoint, which detaches its inputs,
 * recomputes on dtensors: loss and gradients equal the plain run. */
static void test_detach_checkpoint(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(23);
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 6});
    oar_tensor *w1 = oar_randn(OAR_F64, 2, (int64_t[]){6, 8}), *w2 = oar_randn(OAR_F64, 2, (int64_t[]){8, 5});
    oar_tensor *dx = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
    CHECK(oar_tensor_set_requires_grad(dx, true) == 0);
    oar_tensor *d = oar_detach(dx);
    CHECK(d && oar_tensor_is_dist(d) && !oar_tensor_requires_grad(d));
    CHECK(d && placement0(d).kind == OAR_PLACEMENT_SHARD && max_diff(oar_unshard(d), x) == 0);
    oar_tensor *loss[2], *g[2][2];
    for (int ck = 0; ck < 2; ck++) {
        oar_tensor *dw[2] = {oar_shard_tensor(w1, m, (oar_placement[]){oar_shard(1)}),
                             oar_shard_tensor(w2, m, (oar_placement[]){oar_shard(0)})};
        for (int i = 0; i < 2; i++) CHECK(oar_tensor_set_requires_grad(dw[i], true) == 0);
        oar_tensor *y = NULL;
        if (ck) CHECK(oar_checkpoint(mlp_segment, NULL, 3, (oar_tensor *[]){d, dw[0], dw[1]}, 1, &y) == 0);
        else mlp_segment(NULL, 3, (oar_tensor *[]){d, dw[0], dw[1]}, 1, &y);
        loss[ck] = y ? oar_sum(oar_tanh(y), 0, NULL, false) : NULL;
        CHECK(loss[ck] && oar_backward(loss[ck], NULL) == 0);
        for (int i = 0; i < 2; i++) g[ck][i] = oar_tensor_grad(dw[i]);
    }
    CHECK(loss[0] && loss[1] && max_diff(oar_unshard(loss[1]), oar_unshard(loss[0])) < 1e-12);
    for (int i = 0; i < 2; i++)
        CHECK(g[0][i] && g[1][i] && max_diff(oar_unshard(g[1][i]), oar_unshard(g[0][i])) < 1e-12);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* An op whose shape rule casts an input (fft of a real tensor): the cast
 * is recorded on the dtensor, so backward gets a real gradient. */
static void test_cast_inputs(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(25);
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 8});
    oar_tensor *px = oar_clone(x), *dx = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
    CHECK(oar_tensor_set_requires_grad(px, true) == 0 && oar_tensor_set_requires_grad(dx, true) == 0);
    oar_tensor *ref = oar_sum(oar_abs(oar_fft_fft(px, -1, 1, NULL)), 0, NULL, false);
    oar_tensor *got = oar_sum(oar_abs(oar_fft_fft(dx, -1, 1, NULL)), 0, NULL, false);
    CHECK(ref && got && oar_backward(ref, NULL) == 0 && oar_backward(got, NULL) == 0);
    CHECK(got && ref && max_diff(oar_unshard(got), ref) < 1e-10);
    oar_tensor *g = oar_tensor_grad(dx);
    CHECK(g && oar_tensor_dtype(g) == OAR_F64 && max_diff(oar_unshard(g), oar_tensor_grad(px)) < 1e-10);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

static void test_train(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(123);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){4 * W + 2, 6});
    oar_tensor *y = oar_randn(OAR_F32, 2, (int64_t[]){4 * W + 2, 3});
    double ref[5], got[5];
    train(NULL, -1, 0, 0, NULL, x, y, ref, NULL);

    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    int calls = 0;
    train(m, 0, 0, 0, NULL, x, y, got, &calls);
    check_curve("data parallel", got, ref);
    /* one bucket per step: all four gradients in one all-reduce (none with one rank... still one call) */
    CHECK(calls == 5);

    /* the same with buckets overlapped with backward: one parameter per
     * bucket (64 bytes), each started inside backward; the same losses */
    double sync[5];
    memcpy(sync, got, sizeof sync);
    reducer_bucket = 64;
    calls = 0;
    train(m, 0, 0, 0, NULL, x, y, got, &calls);
    check_curve("data parallel, overlapped buckets", got, ref);
    for (int i = 0; i < 5; i++) CHECK(got[i] == sync[i]);
    CHECK(calls == 5 * 4 && reducer_overlapped == 5 * 4);
    reducer_bucket = 0;

    const oar_parallel_rule megatron[2] = {{"0.*", OAR_PARALLEL_COLWISE}, {"2.*", OAR_PARALLEL_ROWWISE}};
    train(m, -1, 0, 2, megatron, x, y, got, NULL);
    check_curve("tensor parallel", got, ref);
    oar_mesh_release(m);

    if (W == 4) {
        oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, (const char *const[]){"dp", "tp"});
        train(m2, 0, 1, 2, megatron, x, y, got, NULL);
        check_curve("2-D data x tensor parallel", got, ref);
        memcpy(sync, got, sizeof sync);
        reducer_bucket = 256;
        train(m2, 0, 1, 2, megatron, x, y, got, NULL);
        check_curve("2-D data x tensor parallel, overlapped buckets", got, ref);
        for (int i = 0; i < 5; i++) CHECK(got[i] == sync[i]);
        CHECK(reducer_overlapped > 0);
        reducer_bucket = 0;
        oar_mesh_release(m2);
    }

    /* the reducer's errors: bad lists; a second backward before wait */
    {
        oar_mesh *m1 = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
        oar_tensor *pa = oar_shard_tensor(oar_ones(OAR_F32, 1, (int64_t[]){4}), m1, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(pa, true);
        CHECK_FAILS(oar_dist_reducer_new(0, &pa, 0), "bad parameter list");
        CHECK_FAILS(oar_dist_reducer_new(1, (oar_tensor *[]){NULL}, 0), "parameter 0 is NULL");
        CHECK_STATUS_FAILS(oar_dist_reducer_wait(NULL), "NULL");
        oar_dist_reducer *red = oar_dist_reducer_new(1, &pa, 0);
        oar_tensor *xd = oar_shard_tensor(oar_ones(OAR_F32, 2, (int64_t[]){2 * W, 4}), m1, (oar_placement[]){oar_shard(0)});
        CHECK(oar_backward(oar_sum(oar_mul(xd, pa), 0, NULL, false), NULL) == 0);
        CHECK(oar_backward(oar_sum(oar_mul(xd, pa), 0, NULL, false), NULL) == 0);
        CHECK_STATUS_FAILS(oar_dist_reducer_wait(red), "changed after its bucket");
        oar_tensor_zero_grad(pa);
        CHECK(oar_backward(oar_sum(oar_mul(xd, pa), 0, NULL, false), NULL) == 0);
        CHECK(oar_dist_reducer_wait(red) == 1 && oar_dist_reducer_overlapped(red) == 1);
        CHECK(max_diff(oar_unshard(oar_tensor_grad(pa)), oar_full(OAR_F32, 1, (int64_t[]){4}, 2.0 * W)) == 0);
        oar_dist_reducer_free(red);
        oar_dist_reducer_free(NULL);
        oar_mesh_release(m1);
    }

    /* bucket size: one all-reduce per gradient when nothing fits together */
    {
        oar_mesh *m1 = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
        oar_tensor *a = oar_ones(OAR_F32, 1, (int64_t[]){4}), *b = oar_ones(OAR_F32, 1, (int64_t[]){4});
        oar_tensor *pa = oar_shard_tensor(a, m1, (oar_placement[]){oar_replicate()});
        oar_tensor *pb = oar_shard_tensor(b, m1, (oar_placement[]){oar_replicate()});
        oar_tensor_set_requires_grad(pa, true);
        oar_tensor_set_requires_grad(pb, true);
        oar_tensor *xd = oar_shard_tensor(oar_ones(OAR_F32, 2, (int64_t[]){2 * W, 4}), m1, (oar_placement[]){oar_shard(0)});
        oar_backward(oar_sum(oar_add(oar_mul(xd, pa), oar_mul(xd, pb)), 0, NULL, false), NULL);
        oar_tensor *ps[2] = {pa, pb};
        CHECK(oar_dtensor_placements(oar_tensor_grad(pa))[0].kind == OAR_PLACEMENT_PARTIAL);
        CHECK(oar_dist_reduce_grads(2, ps, 16) == 2);
        CHECK(oar_dtensor_placements(oar_tensor_grad(pa))[0].kind == OAR_PLACEMENT_REPLICATE);
        CHECK(max_diff(oar_unshard(oar_tensor_grad(pb)), oar_full(OAR_F32, 1, (int64_t[]){4}, 2.0 * W)) == 0);
        CHECK(oar_dist_reduce_grads(2, ps, 0) == 0); /* nothing partial left */
        CHECK(oar_dist_reduce_grads(-1, ps, 0) == -1);
        oar_mesh_release(m1);
    }

    /* bad plans */
    oar_mesh *m3 = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_module *mlp = make_mlp();
    CHECK_STATUS_FAILS(oar_parallelize(NULL, m3, 0, 0, NULL), "NULL");
    CHECK_STATUS_FAILS(oar_parallelize(mlp, m3, 1, 0, NULL), "mesh dim 1");
    CHECK_STATUS_FAILS(oar_parallelize(mlp, m3, 0, 1, (oar_parallel_rule[]){{"*", 7}}), "bad style");
    CHECK_STATUS_FAILS(oar_module_set(mlp, "0.weight", oar_ones(OAR_F32, 1, (int64_t[]){3})), "module_set");
    CHECK_STATUS_FAILS(oar_module_set(mlp, "0.nothing", x), "no parameter");
    oar_module_free(mlp);
    oar_mesh_release(m3);
    oar_pool_pop(pool);
}

/* A peer that does not arrive: rank 0 gives up after the timeout with a
 * clear error, instead of hanging, and the mesh refuses further use. The
 * others make the same call late, which completes the abandoned one. */
static void test_timeout(void) {
    if (W < 2) return;
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *local = oar_ones(OAR_F32, 2, (int64_t[]){2, 3});
    double old = oar_dist_timeout();
    oar_dist_set_timeout(1.0);
    CHECK(oar_dist_timeout() == 1.0);
    if (ME == 0) {
        CHECK_FAILS(oar_dtensor_from_local(local, m, (oar_placement[]){oar_shard(0)}, NULL), "did not make the same call");
        CHECK_FAILS(oar_dtensor_from_local(local, m, (oar_placement[]){oar_shard(0)}, NULL), "unusable");
    } else {
        nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
        oar_tensor *d = oar_dtensor_from_local(local, m, (oar_placement[]){oar_shard(0)}, NULL);
        CHECK(d && oar_tensor_shape(d)[0] == 2 * W);
    }
    oar_dist_set_timeout(old);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* A broadcast whose root does not arrive: the others give up after the
 * timeout with the message of every collective; the root's late call
 * completes (its small message leaves eagerly). */
static void test_broadcast_timeout(void) {
    if (W < 2) return;
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_contiguous(rank_values(ME, OAR_F32));
    double old = oar_dist_timeout();
    oar_dist_set_timeout(1.0);
    if (ME != 1) {
        CHECK_STATUS_FAILS(oar_dist_broadcast_(t, m, 0, 1), "did not make the same call");
        CHECK_STATUS_FAILS(oar_dist_broadcast_(t, m, 0, 1), "unusable");
    } else {
        nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
        CHECK(oar_dist_broadcast_(t, m, 0, 1) == 0);
    }
    oar_dist_set_timeout(old);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* The transformer encoder layer (pre-norm, causal, GELU, f64) trained in
 * data parallel, Megatron tensor parallel (attention projections and the
 * feed-forward block split) and 2-D: the loss curve equals one process's. */
static void test_train_transformer(void) {
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(321);
    oar_tensor *x = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 5, 8});
    oar_tensor *y = oar_randn(OAR_F64, 3, (int64_t[]){2 * W, 5, 8});
    double ref[5], got[5];
    make_model = make_transformer;
    curve_tol = 1e-10;
    train(NULL, -1, 0, 0, NULL, x, y, ref, NULL);
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    train(m, 0, 0, 0, NULL, x, y, got, NULL);
    check_curve("transformer, data parallel", got, ref);
    double sync[5];
    memcpy(sync, got, sizeof sync);
    reducer_bucket = 1024; /* several buckets */
    train(m, 0, 0, 0, NULL, x, y, got, NULL);
    check_curve("transformer, data parallel, overlapped buckets", got, ref);
    for (int i = 0; i < 5; i++) CHECK(got[i] == sync[i]);
    CHECK(reducer_overlapped > 5);
    reducer_bucket = 0;
    const oar_parallel_rule megatron[4] = {
        {"self_attn.in_proj_*", OAR_PARALLEL_COLWISE}, {"self_attn.out_proj.*", OAR_PARALLEL_ROWWISE},
        {"linear1.*", OAR_PARALLEL_COLWISE}, {"linear2.*", OAR_PARALLEL_ROWWISE}};
    train(m, -1, 0, 4, megatron, x, y, got, NULL);
    check_curve("transformer, tensor parallel", got, ref);
    oar_mesh_release(m);
    if (W == 4) {
        oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, (const char *const[]){"dp", "tp"});
        train(m2, 0, 1, 4, megatron, x, y, got, NULL);
        check_curve("transformer, 2-D", got, ref);
        oar_mesh_release(m2);
    }
    make_model = make_mlp;
    curve_tol = 1e-5;
    oar_pool_pop(pool);
}

/* Custom ops (include/oar/custom.h) on dtensors: y = x^2 registered twice,
 * flagged elementwise (follows its input's shards) and not (the replicate
 * fallback), and its gradient, written with ops, run on dtensors. */
static int square_cpu(const oar_custom_kernel_args *k) {
    const double *x = oar_tensor_data(k->in[0]);
    double *y = oar_tensor_data(k->out[0]);
    for (int64_t i = 0; i < oar_tensor_numel(k->in[0]); i++) y[i] = x[i] * x[i];
    return 0;
}
static int square_grad(const oar_custom_grad_args *g) {
    g->grad_in[0] = oar_mul(oar_mul_scalar(g->in[0], 2), g->grad_out[0]);
    return 0;
}

static void test_custom_ops(void) {
    oar_custom_op_desc d = {.name = "dist.square_ew", .n_in = 1, .n_out = 1, .flags = OAR_CUSTOM_ELEMENTWISE,
                            .kernels = {{"cpu", square_cpu}}, .grad = square_grad};
    const oar_custom_op *ew = oar_custom_register(&d);
    d.name = "dist.square";
    d.flags = 0;
    const oar_custom_op *rep = oar_custom_register(&d);
    CHECK(ew && rep);
    if (!ew || !rep) return;
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_manual_seed(9);
    oar_tensor *x = oar_randn(OAR_F64, 2, (int64_t[]){2 * W + 1, 3});
    oar_tensor *xs0 = oar_shard_tensor(x, m, (oar_placement[]){oar_shard(0)});
    int64_t fallbacks = oar_dist_fallback_count();
    oar_tensor *r = check_op(oar_custom_call1(ew, 1, &xs0, NULL), oar_square(x), "custom elementwise S(0)");
    CHECK(placement0(r).kind == OAR_PLACEMENT_SHARD && placement0(r).dim == 0);
    CHECK(oar_dist_fallback_count() == fallbacks);
    r = check_op(oar_custom_call1(rep, 1, &xs0, NULL), oar_square(x), "custom replicated");
    CHECK(placement0(r).kind == OAR_PLACEMENT_REPLICATE);
    CHECK(oar_dist_fallback_count() == fallbacks + 1);
    CHECK(oar_tensor_set_requires_grad(xs0, true) == 0);
    oar_tensor *loss = oar_sum(oar_custom_call1(ew, 1, &xs0, NULL), 0, NULL, false);
    CHECK(loss && oar_backward(loss, NULL) == 0);
    check_op(oar_tensor_grad(xs0), oar_mul_scalar(x, 2), "custom gradient on a dtensor");
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

int main(int argc, char **argv) {
    CHECK(oar_dist_world_size() == 1 && oar_dist_rank() == 0);  /* before init */
    CHECK_FAILS(oar_mesh_create(1, (int64_t[]){1}, NULL, NULL), "oar_dist_init");
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    CHECK(oar_dist_init(&argc, &argv) == 0); /* again: no-op */
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    RUN(test_mesh);
    RUN(test_reshard_1d);
    RUN(test_reshard_2d);
    RUN(test_from_local);
    RUN(test_broadcast);
    RUN(test_ops);
    RUN(test_custom_ops);
    RUN(test_autograd);
    RUN(test_detach_checkpoint);
    RUN(test_cast_inputs);
    RUN(test_train);
    RUN(test_train_transformer);
    RUN(test_errors);
    RUN(test_timeout);
    RUN(test_broadcast_timeout);
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

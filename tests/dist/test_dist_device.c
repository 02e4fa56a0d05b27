/* Collectives on dtensors whose shards live on a device:
 * - on the fakecoll device (tests/devices/plugins/coll_plugin.c), whose
 *   all_reduce, all_gather and reduce_scatter members go through shared
 *   memory and count their calls: Partial -> Replicate (sum, avg, max),
 *   Partial -> Shard and Shard -> Replicate with even blocks go through
 *   the members (one call each, the values are the reductions over the
 *   ranks), while uneven blocks are staged through the host (the counts
 *   do not move); a data-parallel step's gradient reduction
 *   (oar_dist_reduce_grads) goes through all_reduce; oar_dist_broadcast_
 *   through broadcast; moves between meshes through send and recv (the
 *   plugin's send waits for its receiver, so a move where two ranks both
 *   send to and receive from each other passes only in oar's order);
 * - on opencl:0, which has no collective members: every collective is
 *   staged, and results stay on the device (`--opencl`: a test of its own,
 *   skipped as a whole, exit 77, where no OpenCL device exists);
 * - on cuda:<rank> where the cuda plugin loads (NCCL), values only
 *   (`--cuda`, skipped as a whole without a GPU).
 * Runs alone and under mpirun with 2 and 4 ranks (CTest runs all three;
 * the OpenCL part alone and on 2 ranks). */
#include "test.h"

#include <dlfcn.h>
#include <oar/dist.h>

static int W, ME;
/* the plugin's: 0 all_reduce, 1 all_gather, 2 reduce_scatter, 3 broadcast, 4 send, 5 recv */
static long (*coll_calls)(int kind);

/* Rank r's local value: 4 x 3, element i = (r + 1) (i + 1) / 2. */
static oar_tensor *local_value(int r) {
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)((r + 1) * (i + 1)) * 0.5f;
    return oar_tensor_from_data(v, OAR_F32, 2, (int64_t[]){4, 3});
}

static void check_on(oar_tensor *t, oar_device *d, const double *want, int64_t n) {
    CHECK(t && oar_tensor_device(t) == d);
    oar_tensor *h = oar_tensor_to(t, oar_device_cpu());
    CHECK_VALUES(h, want, n, 1e-6);
}

/* The plugin's calls since `base` equal (ar, ag, rs); nothing to check
 * on a device without the plugin. */
static void check_calls(bool hooked, const long *base, long ar, long ag, long rs) {
    if (!hooked) return;
    CHECK(coll_calls(0) - base[0] == ar);
    CHECK(coll_calls(1) - base[1] == ag);
    CHECK(coll_calls(2) - base[2] == rs);
}

static void run_on(oar_device *dev, bool hooked) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    CHECK(m != NULL);
    const int64_t shape[2] = {4, 3};
    double sum[12], avg[12], max[12];
    for (int i = 0; i < 12; i++) {
        sum[i] = (i + 1) * 0.5 * W * (W + 1) / 2.0;
        avg[i] = sum[i] / W;
        max[i] = (i + 1) * 0.5 * W;
    }
    oar_tensor *local = oar_tensor_to(local_value(ME), dev);
    long base[3] = {0, 0, 0};
    for (int k = 0; hooked && k < 3; k++) base[k] = coll_calls(k);
    /* Partial -> Replicate: all-reduce */
    const oar_reduce_op ops[3] = {OAR_REDUCE_SUM, OAR_REDUCE_AVG, OAR_REDUCE_MAX};
    const double *want[3] = {sum, avg, max};
    for (int k = 0; k < 3; k++) {
        oar_tensor *x = oar_dtensor_from_local(local, m, (oar_placement[]){oar_partial(ops[k])}, shape);
        oar_tensor *y = oar_reshard(x, m, (oar_placement[]){oar_replicate()});
        check_on(oar_dtensor_local(y), dev, want[k], 12);
        check_calls(hooked, base, k + 1, 0, 0);
    }
    /* Partial -> Shard(0): reduce-scatter, 4 rows in even blocks; then
     * all-gather back to the whole value */
    oar_tensor *x = oar_dtensor_from_local(local, m, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)}, shape);
    oar_tensor *s = oar_reshard(x, m, (oar_placement[]){oar_shard(0)});
    CHECK(s && oar_tensor_device(oar_dtensor_local(s)) == dev);
    check_on(oar_unshard(s), dev, sum, 12);
    check_calls(hooked, base, 3, 1, 1);
    /* Shard(1): 3 columns, uneven on 2 ranks (staged there) */
    long even = 3 % W == 0;
    oar_tensor *c = oar_reshard(x, m, (oar_placement[]){oar_shard(1)});
    CHECK(c && oar_tensor_device(oar_dtensor_local(c)) == dev);
    oar_tensor *r = oar_reshard(c, m, (oar_placement[]){oar_replicate()});
    check_on(oar_dtensor_local(r), dev, sum, 12);
    check_calls(hooked, base, 3, 1 + even, 1 + even);
    /* a move to another mesh over the same ranks (every rank holds the
     * value, so each takes its part locally: no message), then the whole
     * value back (an all-gather of the uneven columns) */
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){1, W}, NULL, NULL);
    oar_tensor *mv = oar_reshard(r, m2, (oar_placement[]){oar_replicate(), oar_shard(1)});
    CHECK(mv && oar_tensor_device(oar_dtensor_local(mv)) == dev);
    check_on(oar_unshard(mv), dev, sum, 12);
    check_calls(hooked, base, 3, 1 + 2 * even, 1 + even);
    oar_mesh_release(m2);
    oar_mesh_release(m);
    oar_pool_pop(pool);
}

/* A data-parallel step on dev: w replicated, the batch sharded by rows,
 * loss = sum(x @ w); oar_dist_reduce_grads all-reduces w's Partial
 * gradient (through the member when hooked): the sum over all ranks' rows. */
static void data_parallel_on(oar_device *dev, bool hooked) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_tensor *w = oar_dtensor_from_local(oar_tensor_to(oar_ones(OAR_F32, 2, (int64_t[]){3, 2}), dev), m,
                                           (oar_placement[]){oar_replicate()}, (int64_t[]){3, 2});
    CHECK(w && oar_tensor_set_requires_grad(w, true) == 0);
    oar_tensor *x = oar_dtensor_from_local(oar_tensor_to(local_value(ME), dev), m,
                                           (oar_placement[]){oar_shard(0)}, NULL);
    CHECK(oar_backward(oar_sum(oar_matmul(x, w), 0, NULL, false), NULL) == 0);
    long before = hooked ? coll_calls(0) : 0;
    int n = oar_dist_reduce_grads(1, &w, 0);
    CHECK(n >= 1);
    if (hooked) CHECK(coll_calls(0) - before == n);
    double want[6];
    for (int i = 0; i < 3; i++) {
        double g = 0;
        for (int r = 0; r < W; r++)
            for (int row = 0; row < 4; row++) g += (r + 1) * (row * 3 + i + 1) * 0.5;
        want[2 * i] = want[2 * i + 1] = g;
    }
    oar_tensor *g = oar_tensor_grad(w);
    CHECK(g && oar_tensor_is_dist(g) && oar_dtensor_placements(g)[0].kind == OAR_PLACEMENT_REPLICATE);
    if (g) check_on(oar_dtensor_local(g), dev, want, 6);
    oar_tensor_zero_grad(w);
    oar_mesh_release(m);
    oar_pool_pop(pool);
}

/* oar_dist_broadcast_ on dev: f32 and f64 from the last rank of a 1-D
 * mesh, along dim 1 of a 2-D mesh (each row of the mesh from its own
 * root), and into a slice that does not start its buffer (the rows around
 * it keep their values). One broadcast member call each when hooked. */
static void broadcast_on(oar_device *dev, bool hooked) {
    oar_pool *pool = oar_pool_push();
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    int64_t s1 = W % 2 ? 1 : 2;
    oar_mesh *m2 = oar_mesh_create(2, (int64_t[]){W / s1, s1}, NULL, NULL);
    long before = hooked ? coll_calls(3) : 0;
    const oar_dtype dtypes[2] = {OAR_F32, OAR_F64};
    for (int k = 0; k < 2; k++) {
        oar_tensor *t = oar_tensor_to(oar_cast(local_value(ME), dtypes[k]), dev);
        CHECK(oar_dist_broadcast_(t, m, 0, W - 1) == 0);
        double want[12];
        for (int i = 0; i < 12; i++) want[i] = W * (i + 1) * 0.5;
        check_on(t, dev, want, 12);
        int root = ME / (int)s1 * (int)s1; /* coordinate 0 along dim 1 of this rank's row */
        oar_tensor *u = oar_tensor_to(oar_cast(local_value(ME), dtypes[k]), dev);
        CHECK(oar_dist_broadcast_(u, m2, 1, 0) == 0);
        for (int i = 0; i < 12; i++) want[i] = (root + 1) * (i + 1) * 0.5;
        check_on(u, dev, want, 12);
    }
    oar_tensor *big = oar_tensor_to(local_value(ME), dev); /* 4 x 3 */
    CHECK(oar_dist_broadcast_(oar_slice(big, 0, 1, 3, 1), m, 0, 0) == 0);
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = (i < 3 || i >= 9 ? ME + 1 : 1) * (i + 1) * 0.5;
    check_on(big, dev, want, 12);
    if (hooked) CHECK(coll_calls(3) - before == 5);
    if (hooked) /* the member's failure comes back (the plugin's slot holds 1 MiB) */
        CHECK_STATUS_FAILS(oar_dist_broadcast_(oar_full_on(OAR_F32, 1, (int64_t[]){300000}, 1.0, dev), m, 0, 0),
                           "fakecoll broadcast: more than 1 MiB");
    oar_mesh_release(m2);
    oar_mesh_release(m);
    oar_pool_pop(pool);
}

/* x (plain global value g, on dev) placed on mesh a by `from`, moved to
 * mesh b with `to`: the global value comes out on b's ranks, on dev (a
 * rank outside b gets a dtensor without data whose shard is on dev), and,
 * when hooked, this rank made `sends` send and `recvs` recv member calls. */
static void check_move(oar_device *dev, bool hooked, oar_mesh *a, const oar_placement *from,
                       oar_mesh *b, const oar_placement *to, oar_tensor *g, long sends, long recvs) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_shard_tensor(oar_tensor_to(g, dev), a, from);
    long s0 = hooked ? coll_calls(4) : 0, r0 = hooked ? coll_calls(5) : 0;
    oar_tensor *y = oar_reshard(x, b, to);
    CHECK(y && oar_tensor_device(oar_dtensor_local(y)) == dev);
    if (hooked) CHECK(coll_calls(4) - s0 == sends && coll_calls(5) - r0 == recvs);
    if (y && oar_mesh_coord(b, 0) >= 0) {
        int64_t n = oar_tensor_numel(g);
        double want[64];
        oar_tensor *g64 = oar_contiguous(oar_cast(g, OAR_F64));
        memcpy(want, oar_tensor_data(g64), sizeof(double) * (size_t)n);
        check_on(oar_unshard(y), dev, want, n);
    }
    oar_pool_pop(pool);
}

/* Moves between meshes of shards on dev. The target mesh lists the ranks
 * in reverse, so with Shard(0) -> Shard(0) each rank sends its rows to its
 * mirror rank and gets the mirror's: on 2 ranks, both send to and receive
 * from each other (on the plugin, a deadlock but for oar's order). */
static void move_on(oar_device *dev, bool hooked) {
    oar_pool *pool = oar_pool_push();
    int rev[4], lo[2] = {0, 1}, hi[2] = {2, 3};
    for (int r = 0; r < W && W <= 4; r++) rev[r] = W - 1 - r;
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_mesh *mr = oar_mesh_create(1, (int64_t[]){W}, rev, NULL);
    oar_tensor *g = oar_reshape(oar_arange(0, 24, 1, OAR_F32), 2, (int64_t[]){4, 6});
    oar_tensor *g64 = oar_cast(g, OAR_F64);
    const oar_placement S0 = oar_shard(0), S1 = oar_shard(1), R = oar_replicate();
    const oar_placement P = oar_partial(OAR_REDUCE_SUM);
    long mirror = W > 1 && ME != W - 1 - ME; /* a rank in the middle of an odd mesh keeps its rows */
    check_move(dev, hooked, m, &S0, mr, &S0, g, mirror, mirror);
    check_move(dev, hooked, m, &S0, mr, &S0, g64, mirror, mirror);
    /* the value is whole on every source rank after the reduction: local parts only */
    check_move(dev, hooked, m, &P, mr, &S1, g64, 0, 0);
    check_move(dev, hooked, m, &R, mr, &P, g, 0, 0);
    /* the gradient of a move is the reverse move, through the members too */
    oar_tensor *x = oar_tensor_to(g64, dev), *c = oar_tensor_to(oar_mul_scalar(g64, -0.5), dev);
    CHECK(oar_tensor_set_requires_grad(x, true) == 0);
    long s0 = hooked ? coll_calls(4) : 0;
    oar_tensor *y = oar_reshard(oar_shard_tensor(x, m, &S0), mr, &S0);
    CHECK(oar_backward(y, oar_shard_tensor(c, mr, &S0)) == 0);
    if (hooked) CHECK(coll_calls(4) - s0 == 2 * mirror);
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = -0.5 * i;
    check_on(oar_tensor_grad(x), dev, want, 24);
    if (W == 4) {
        /* 2 x 2 [S(0), S(1)] -> reversed 1-D S(0): each target row comes in
         * two halves from two other ranks; and back to [S(0), R]: each
         * target's two rows from the two ranks holding them. Either way
         * ranks 0 and 2 (1 and 3) send to each other. */
        oar_mesh *m22 = oar_mesh_create(2, (int64_t[]){2, 2}, NULL, NULL);
        check_move(dev, hooked, m22, (oar_placement[]){S0, S1}, mr, &S0, g64, 2, 2);
        check_move(dev, hooked, mr, &S0, m22, (oar_placement[]){S0, R}, g, 2, 2);
        /* disjoint meshes: ranks 2, 3 hold dtensors without data on dev */
        oar_mesh *a = oar_mesh_create(1, (int64_t[]){2}, lo, NULL);
        oar_mesh *b = oar_mesh_create(1, (int64_t[]){2}, hi, NULL);
        check_move(dev, hooked, a, &S0, b, &S1, g, ME < 2 ? 2 : 0, ME < 2 ? 0 : 2);
        oar_mesh_release(a);
        oar_mesh_release(b);
        oar_mesh_release(m22);
    }
    oar_mesh_release(mr);
    oar_mesh_release(m);
    oar_pool_pop(pool);
}

static void test_hooked(void) {
    oar_device *dev = oar_device_get("fakecoll:0");
    void *lib = dlopen(OAR_TEST_COLL_PLUGIN_DIR "/fakecoll.so", RTLD_NOW | RTLD_NOLOAD);
    coll_calls = lib ? (long (*)(int))dlsym(lib, "oar_test_coll_calls") : NULL;
    CHECK(dev && coll_calls);
    if (dev && coll_calls) run_on(dev, true);
    if (dev && coll_calls) data_parallel_on(dev, true);
    if (dev && coll_calls) broadcast_on(dev, true);
    if (dev && coll_calls) move_on(dev, true);
    if (lib) dlclose(lib);
}

static oar_device *cl;

static void test_staged_opencl(void) {
    run_on(cl, false);
    data_parallel_on(cl, false);
    broadcast_on(cl, false);
    move_on(cl, false);
}

/* On a GPU machine (the cuda plugin found, OAR_PLUGIN_PATH naming its
 * folder): values through NCCL, one GPU per rank where there are enough,
 * else staged (NCCL refuses two ranks on one GPU). */
static oar_device *cu;

static void test_cuda(void) {
    run_on(cu, false);
    data_parallel_on(cu, false);
}

int main(int argc, char **argv) {
#ifdef OAR_PLUGIN_BUILD_DIR
    const char *dirs = OAR_TEST_COLL_PLUGIN_DIR ":" OAR_PLUGIN_BUILD_DIR;
#else
    const char *dirs = OAR_TEST_COLL_PLUGIN_DIR;
#endif
    /* --cuda: the caller's folders first (a build tree carried to another
     * path: scripts/gpu-check.sh names its plugins), then the build's; the
     * other parts see the build's alone */
    const char *given = argc > 1 && !strcmp(argv[1], "--cuda") ? getenv("OAR_PLUGIN_PATH") : NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", given && *given ? given : "", given && *given ? ":" : "", dirs);
    setenv("OAR_PLUGIN_PATH", path, 1);
    setenv("OAR_PLUGIN_NO_INSTALL_DIR", "1", 1);
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    const char *part = argc > 1 ? argv[1] : "";
    if (!strcmp(part, "--opencl")) {
        cl = oar_device_get("opencl:0"); /* every rank sees the same machine */
        if (!cl) {
            printf("rank %d: skip: no OpenCL device (%s)\n", ME, oar_last_error());
            oar_dist_finalize();
            return 77;
        }
        RUN(test_staged_opencl);
    } else if (!strcmp(part, "--cuda")) {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", ME);
        cu = oar_device_get(name);
        if (!cu) cu = oar_device_get("cuda:0");
        const char *req = getenv("OAR_REQUIRE_CUDA");
        if (!cu && req && *req && strcmp(req, "0")) { /* a GPU machine: no device is a failure */
            fprintf(stderr, "rank %d: OAR_REQUIRE_CUDA is set and there is no CUDA device: %s\n", ME,
                    oar_last_error());
            oar_dist_finalize();
            return 1;
        }
        if (!cu) {
            printf("rank %d: skip: no CUDA device (%s)\n", ME, oar_last_error());
            oar_dist_finalize();
            return 77;
        }
        CHECK(!strncmp(oar_device_name(cu), "cuda:", 5));
        RUN(test_cuda);
    } else {
        RUN(test_hooked);
    }
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

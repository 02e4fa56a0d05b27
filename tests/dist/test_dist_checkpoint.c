/* Distributed checkpoints (oar_dist_checkpoint_save/load/read): a
 * checkpoint saved on one mesh loads onto another with the same global
 * values. Modes:
 *   test_dist_checkpoint               one process: round trips on a 1-rank
 *                                      mesh and plain tensors, every refusal
 *                                      (shape, dtype, missing name or file,
 *                                      corrupt index or chunk, Partial target,
 *                                      bad arguments), old generations removed
 *   test_dist_checkpoint --save DIR    on 4 ranks: a 2 x 2 (dp x tp) mesh with
 *                                      Shard, Replicate and Partial placements,
 *                                      uneven chunks; then loaded back on the
 *                                      same ranks as a 4-rank 1-D mesh
 *   test_dist_checkpoint --load DIR    on any number of ranks (CTest: 2 and
 *                                      1): DIR from --save, loaded onto a
 *                                      W-rank mesh with other placements, and
 *                                      read whole
 * Values against the global value every rank computes the same way. */
#include "test.h"

#include <dirent.h>
#include <oar/dist.h>
#include <unistd.h>

static int W, ME;

static double max_diff(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b) || oar_tensor_dtype(a) != oar_tensor_dtype(b))
        return INFINITY;
    if (!oar_tensor_numel(a)) return 0;
    oar_tensor *d = oar_amax(oar_abs(oar_sub(a, b)), 0, NULL, false);
    return d ? oar_tensor_item(oar_cast(d, OAR_F64)) : INFINITY;
}

/* The global values of the test's tensors: distinct, exact in every dtype. */
static oar_tensor *global(const char *name) {
    if (!strcmp(name, "w1")) /* [8, 6] f32 */
        return oar_reshape(oar_arange(0, 48, 1, OAR_F32), 2, (int64_t[]){8, 6});
    if (!strcmp(name, "w2")) /* [5, 7] f64: uneven chunks over 2 */
        return oar_mul_scalar(oar_reshape(oar_arange(-17, 18, 1, OAR_F64), 2, (int64_t[]){5, 7}), 0.25);
    if (!strcmp(name, "b")) /* [6] f32 */
        return oar_add_scalar(oar_arange(0, 6, 1, OAR_F32), 100);
    if (!strcmp(name, "p")) /* [4, 4] f64, saved Partial(sum) */
        return oar_reshape(oar_arange(1, 17, 1, OAR_F64), 2, (int64_t[]){4, 4});
    if (!strcmp(name, "c")) { /* [3, 4] complex64 */
        oar_tensor *re = oar_reshape(oar_arange(0, 12, 1, OAR_F32), 2, (int64_t[]){3, 4});
        return oar_complex(re, oar_mul_scalar(re, -2));
    }
    if (!strcmp(name, "steps")) /* a plain i64 scalar */
        return oar_scalar_of(1234, OAR_I64);
    return NULL;
}

static const char *NAMES[] = {"w1", "w2", "b", "p", "c", "steps"};
enum { N_NAMES = 6 };

/* A zero tensor of name's global shape and dtype. */
static oar_tensor *zeros_like_global(const char *name) { return oar_zeros_like(global(name)); }

static int count_shard_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "shard-", 6);
    if (d) closedir(d);
    return n;
}

/* Loads every name into targets made by place(name, zeros) and checks
 * each shard against the global value resharded the same way. */
static void load_and_compare(const char *dir, oar_mesh *m, const oar_placement (*place)[OAR_MESH_MAX_DIMS]) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *t[N_NAMES];
    for (int i = 0; i < N_NAMES; i++) {
        oar_tensor *z = zeros_like_global(NAMES[i]);
        t[i] = m ? oar_shard_tensor(z, m, place[i]) : z;
    }
    CHECK(oar_dist_checkpoint_load(dir, N_NAMES, NAMES, t) == 0);
    for (int i = 0; i < N_NAMES; i++) {
        oar_tensor *got = oar_tensor_is_dist(t[i]) ? oar_unshard(t[i]) : t[i];
        double err = max_diff(got, global(NAMES[i]));
        if (err != 0) fprintf(stderr, "rank %d: %s differs by %g (%s)\n", ME, NAMES[i], err, oar_last_error());
        CHECK(err == 0);
        if (oar_tensor_is_dist(t[i])) { /* the shard itself, not only the gathered value */
            oar_tensor *want = oar_dtensor_local(oar_shard_tensor(global(NAMES[i]), m, place[i]));
            CHECK(max_diff(oar_dtensor_local(t[i]), want) == 0);
        }
    }
    oar_pool_pop(pool);
}

/* ---- one process ------------------------------------------------------------ */

static char dir1[256];

static void test_round_trip_one_process(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){1}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    oar_tensor *t[N_NAMES];
    for (int i = 0; i < N_NAMES; i++)
        t[i] = i < 3 ? oar_shard_tensor(global(NAMES[i]), m, (oar_placement[]){oar_shard(0)}) : global(NAMES[i]);
    CHECK(oar_dist_checkpoint_save(dir1, N_NAMES, NAMES, t) == 0);
    CHECK(count_shard_files(dir1) == 1);
    CHECK(oar_dist_checkpoint_save(dir1, N_NAMES, NAMES, t) == 0); /* over itself: one generation left */
    CHECK(count_shard_files(dir1) == 1);
    oar_placement place[N_NAMES][OAR_MESH_MAX_DIMS];
    for (int i = 0; i < N_NAMES; i++) place[i][0] = oar_replicate();
    load_and_compare(dir1, m, (const oar_placement(*)[OAR_MESH_MAX_DIMS])place);
    load_and_compare(dir1, NULL, (const oar_placement(*)[OAR_MESH_MAX_DIMS])place);
    for (int i = 0; i < N_NAMES; i++) CHECK(max_diff(oar_dist_checkpoint_read(dir1, NAMES[i]), global(NAMES[i])) == 0);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

static void test_refusals(void) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){1}, NULL, NULL);
    oar_pool *pool = oar_pool_push();
    const char *one[] = {"w1"}, *two[] = {"w1", "w1"};
    oar_tensor *w = zeros_like_global("w1");
    oar_tensor *pair[] = {w, w};
    /* arguments */
    CHECK_STATUS_FAILS(oar_dist_checkpoint_save(NULL, 1, one, &w), "dir is NULL");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_save(dir1, 2, two, pair), "given twice");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_save(dir1, 1, one, (oar_tensor *[]){NULL}), "tensor 0 (\"w1\") is NULL");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_save(dir1, -1, one, &w), "n = -1");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir1, 1, (const char *[]){""}, &w), "name 0 is NULL or empty");
    CHECK_FAILS(oar_dist_checkpoint_read(dir1, NULL), "name is NULL");
    /* what the checkpoint says against the target */
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir1, 1, (const char *[]){"w2"}, &w),
                       "tensor \"w2\" has global shape [5, 7] in the checkpoint");
    oar_tensor *w64 = oar_zeros(OAR_F64, 2, (int64_t[]){8, 6});
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir1, 1, one, &w64), "tensor \"w1\" is float32 in the checkpoint");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir1, 1, (const char *[]){"nope"}, &w), "has no tensor \"nope\"");
    CHECK_FAILS(oar_dist_checkpoint_read(dir1, "nope"), "has no tensor \"nope\"");
    oar_tensor *partial = oar_shard_tensor(w, m, (oar_placement[]){oar_partial(OAR_REDUCE_SUM)});
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir1, 1, one, &partial), "is Partial here");
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load("/nonexistent-oar-ckpt", 1, one, &w), "cannot open");

    /* a damaged checkpoint: a copy of dir1 with one thing wrong at a time */
    char dir2[300], path[600], cmd[1400], shard[600] = "";
    snprintf(dir2, sizeof dir2, "%s-damaged", dir1);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir2, dir1, dir2);
    CHECK(system(cmd) == 0);
    DIR *d = opendir(dir2);

    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "shard-", 6)) snprintf(shard, sizeof shard, "%s/%s", dir2, e->d_name);
    if (d) closedir(d);
    CHECK(shard[0]);
    /* a chunk of another shape than the index says */
    oar_tensor *wrong = oar_zeros(OAR_F32, 2, (int64_t[]){8, 5});
    CHECK(oar_safetensors_save(shard, 1, one, &wrong) == 0);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "not the chunk the index describes");
    /* a missing shard file */
    CHECK(unlink(shard) == 0);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "cannot open");
    /* an index that is not JSON, or not ours */
    snprintf(path, sizeof path, "%s/index.json", dir2);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"oar.dist_checkpoint\", \"version\": 1, ", f) >= 0);
    if (f) fclose(f);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "not valid JSON");
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"something else\", \"version\": 1}", f) >= 0);
    if (f) fclose(f);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "not an oar distributed checkpoint index");
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"oar.dist_checkpoint\", \"version\": 99}", f) >= 0);
    if (f) fclose(f);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "has version 99");
    /* chunks that do not cover the target */
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"oar.dist_checkpoint\", \"version\": 1, \"tensors\": [{\"name\": \"w1\", "
                     "\"dtype\": \"float32\", \"shape\": [8, 6], \"chunks\": []}]}", f) >= 0);
    if (f) fclose(f);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "covers 0 of the 48 elements");
    /* a chunk naming a file outside the folder */
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"oar.dist_checkpoint\", \"version\": 1, \"tensors\": [{\"name\": \"w1\", "
                     "\"dtype\": \"float32\", \"shape\": [8, 6], \"chunks\": [{\"file\": \"../x.safetensors\", "
                     "\"offset\": [0, 0], \"shape\": [8, 6]}]}]}", f) >= 0);
    if (f) fclose(f);
    CHECK_STATUS_FAILS(oar_dist_checkpoint_load(dir2, 1, one, &w), "names a bad shard file");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir2);
    CHECK(system(cmd) == 0);
    /* an unwritable folder: the save fails and says where */
    CHECK_STATUS_FAILS(oar_dist_checkpoint_save("/proc/oar-ckpt", 1, one, &w), "/proc/oar-ckpt");
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* ---- several ranks ---------------------------------------------------------- */

/* On a 2 x (W/2) mesh (dp x tp): w1 Shard(0) on tp, w2 Shard(1) on dp and
 * Shard(0) on tp (uneven), b replicated, p Partial(sum) on tp, c Shard(1)
 * on dp, steps plain. */
static void save_on_2d(const char *dir) {
    oar_mesh *m = oar_mesh_create(2, (int64_t[]){2, W / 2}, NULL, (const char *const[]){"dp", "tp"});
    CHECK(m != NULL);
    oar_pool *pool = oar_pool_push();
    const oar_placement place[N_NAMES][2] = {
        {oar_replicate(), oar_shard(0)}, {oar_shard(1), oar_shard(0)},       {oar_replicate(), oar_replicate()},
        {oar_replicate(), oar_partial(OAR_REDUCE_SUM)}, {oar_shard(1), oar_replicate()}, {{0}, {0}},
    };
    oar_tensor *t[N_NAMES];
    for (int i = 0; i < N_NAMES; i++)
        t[i] = i < 5 ? oar_shard_tensor(global(NAMES[i]), m, place[i]) : global(NAMES[i]);
    CHECK(oar_dist_checkpoint_save(dir, N_NAMES, NAMES, t) == 0);
    oar_pool_pop(pool);
    oar_mesh_release(m);
}

/* Onto a W-rank 1-D mesh: w1 Shard(1), w2 Shard(0), b Shard(0), p
 * Replicate, c Shard(0), steps plain. */
static void load_on_1d(const char *dir) {
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){W}, NULL, NULL);
    oar_placement place[N_NAMES][OAR_MESH_MAX_DIMS] = {
        {oar_shard(1)}, {oar_shard(0)}, {oar_shard(0)}, {oar_replicate()}, {oar_shard(0)}, {oar_replicate()},
    };
    load_and_compare(dir, m, (const oar_placement(*)[OAR_MESH_MAX_DIMS])place);
    oar_mesh_release(m);
    if (ME == 0) { /* and whole, as one process would read it */
        oar_pool *pool = oar_pool_push();
        for (int i = 0; i < N_NAMES; i++) CHECK(max_diff(oar_dist_checkpoint_read(dir, NAMES[i]), global(NAMES[i])) == 0);
        oar_pool_pop(pool);
    }
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    W = oar_dist_world_size();
    ME = oar_dist_rank();
    const char *mode = argc > 1 ? argv[1] : "", *dir = argc > 2 ? argv[2] : NULL;
    if (!strcmp(mode, "--save") && dir) {
        if (W % 2) {
            fprintf(stderr, "--save needs an even number of ranks, got %d\n", W);
            oar_dist_finalize();
            return 1;
        }
        test_current = "save on dp x tp";
        save_on_2d(dir);
        test_current = "load back on a 1-D mesh";
        load_on_1d(dir);
    } else if (!strcmp(mode, "--load") && dir) {
        test_current = "load on another world";
        load_on_1d(dir);
    } else if (!mode[0]) {
        snprintf(dir1, sizeof dir1, "%s/oar-ckpt-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
        RUN(test_round_trip_one_process);
        RUN(test_refusals);
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir1);
        CHECK(system(cmd) == 0);
    } else {
        fprintf(stderr, "usage: test_dist_checkpoint [--save DIR | --load DIR]\n");
        oar_dist_finalize();
        return 2;
    }
    int rc = test_summary();
    oar_dist_finalize();
    return rc;
}

/* The CSV reader (header, CRLF, blank lines, dtypes; bad fields and ragged
 * rows reported with line and column), the loader's random crop and flip
 * (every output checked to be a shift or a mirror of its sample), the
 * transform hook, set_epoch, and background prefetch giving exactly the
 * batches of the synchronous loader. */
#include "test.h"

#include <oar/data.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static const char *write_text(const char *name, const char *text) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

static void test_csv(void) {
    oar_pool *pool = oar_pool_push();
    const char *p = write_text("a.csv", "x,y,label\r\n1.5, -2,0\r\n\r\n3e2,inf ,1\n  4,5,2");
    oar_tensor *t = oar_csv_load(p, &(oar_csv_options){.header = true});
    CHECK(t && oar_tensor_dtype(t) == OAR_F32 && oar_tensor_shape(t)[0] == 3 &&
          oar_tensor_shape(t)[1] == 3);
    CHECK_VALUES(t, ((double[]){1.5, -2, 0, 300, INFINITY, 1, 4, 5, 2}), 9, 0);
    oar_tensor *d = oar_csv_load(write_text("b.csv", "0.1;0.2\n0.3;0.4\n"),
                                 &(oar_csv_options){.delimiter = ';', .dtype = OAR_F64});
    CHECK(d && oar_tensor_dtype(d) == OAR_F64);
    CHECK_VALUES(d, ((double[]){0.1, 0.2, 0.3, 0.4}), 4, 0);
    /* one column, no options */
    CHECK_VALUES(oar_csv_load(write_text("c.csv", "7\n8\n"), NULL), ((double[]){7, 8}), 2, 0);

    CHECK_FAILS(oar_csv_load(p, NULL), "line 1, column 1: \"x\" is not a number (a header row? set header)");
    CHECK_FAILS(oar_csv_load(write_text("d.csv", "1,2\n3,abc\n"), NULL),
                "line 2, column 2: \"abc\" is not a number");
    CHECK_FAILS(oar_csv_load(write_text("e.csv", "1,2\n3,4\n5\n"), NULL),
                "line 3 has 1 columns, expected 2");
    CHECK_FAILS(oar_csv_load(write_text("f.csv", "1,,2\n"), NULL), "column 2: \"\" is not a number");
    CHECK_FAILS(oar_csv_load(write_text("g.csv", "1,2 3\n"), NULL), "\"2 3\" is not a number");
    CHECK_FAILS(oar_csv_load(write_text("h.csv", "h1,h2\n"), &(oar_csv_options){.header = true}),
                "holds no rows");
    CHECK_FAILS(oar_csv_load(write_text("i.csv", ""), NULL), "holds no rows");
    CHECK_FAILS(oar_csv_load(tmp_path("missing.csv"), NULL), "cannot open");
    CHECK_FAILS(oar_csv_load(NULL, NULL), "path is NULL");
    CHECK_FAILS(oar_csv_load(p, &(oar_csv_options){.dtype = OAR_I64}), "not float32 or float64");
    CHECK_FAILS(oar_csv_load(p, &(oar_csv_options){.delimiter = '.'}), "cannot separate");
    oar_pool_pop(pool);
}

/* A dataset of n images [1, 4, 4] with values 100 * i + (1..16), labels i. */
static oar_dataset *image_ds(int64_t n) {
    oar_pool *p = oar_pool_push();
    float *v = malloc((size_t)n * 16 * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 16; k++)
            v[i * 16 + k] = (float)(100 * i + k + 1);
    oar_tensor *x = oar_tensor_from_data(v, OAR_F32, 4, (int64_t[]){n, 1, 4, 4});
    oar_dataset *ds = oar_dataset_new(x, oar_arange(0, (double)n, 1, OAR_I64));
    free(v);
    oar_pool_pop(p);
    return ds;
}

/* out (4x4) is img shifted by some (dy, dx) in [-pad, pad], zero-filled,
 * optionally mirrored; returns 1 for a plain shift, 2 for a mirrored one,
 * 0 for neither. */
static int classify(const double *out, int64_t i, int pad, bool allow_flip) {
    for (int flip = 0; flip <= (allow_flip ? 1 : 0); flip++)
        for (int dy = -pad; dy <= pad; dy++)
            for (int dx = -pad; dx <= pad; dx++) {
                bool ok = true;
                for (int r = 0; r < 4 && ok; r++)
                    for (int c = 0; c < 4 && ok; c++) {
                        int cc = flip ? 3 - c : c, sr = r + dy, sc = cc + dx;
                        double want = sr >= 0 && sr < 4 && sc >= 0 && sc < 4
                                          ? (double)(100 * i + sr * 4 + sc + 1)
                                          : 0;
                        ok = out[r * 4 + c] == want;
                    }
                if (ok) return flip ? 2 : 1;
            }
    return 0;
}

static void test_augment(void) {
    oar_dataset *ds = image_ds(64);
    oar_loader_options o = {.batch_size = 16, .shuffle = true, .seed = 9, .random_crop_padding = 2};
    oar_loader *l = oar_loader_new(ds, &o);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x, *y;
    int shifted = 0, moved = 0;
    while (oar_loader_next(l, &x, &y) == 1) {
        double *xv = test_values(x), *yv = test_values(y);
        for (int64_t r = 0; r < oar_tensor_shape(x)[0]; r++) {
            int k = classify(xv + 16 * r, (int64_t)yv[r], 2, false);
            shifted += k == 1;
            moved += k == 1 && classify(xv + 16 * r, (int64_t)yv[r], 0, false) == 0;
        }
        free(xv);
        free(yv);
    }
    CHECK(shifted == 64);
    CHECK(moved > 40); /* 24 of 25 offsets move the window */
    oar_loader_free(l);

    /* flips only: each sample mirrored or not; both happen */
    o = (oar_loader_options){.batch_size = 64, .seed = 1, .random_hflip = true};
    l = oar_loader_new(ds, &o);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    double *xv = test_values(x);
    int plain = 0, mirrored = 0;
    for (int r = 0; r < 64; r++) {
        bool is_plain = classify(xv + 16 * r, r, 0, false) == 1;
        plain += is_plain;
        mirrored += !is_plain && classify(xv + 16 * r, r, 0, true) == 2;
    }
    free(xv);
    CHECK(plain + mirrored == 64 && plain > 15 && mirrored > 15);
    /* the same epoch again draws the same flips; the next epoch others */
    oar_tensor *first = oar_clone(x);
    CHECK(oar_loader_next(l, &x, &y) == 0);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_tensor_item(oar_sum(oar_ne(first, x), 0, NULL, false)) > 0);
    CHECK(oar_loader_set_epoch(l, 0) == 0 && oar_loader_epoch(l) == 0);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_tensor_item(oar_sum(oar_ne(first, x), 0, NULL, false)) == 0);
    oar_loader_free(l);
    oar_pool_pop(pool);

    /* crop padding fills with the normalized value of a raw 0 */
    pool = oar_pool_push();
    o = (oar_loader_options){.batch_size = 64, .seed = 3, .random_crop_padding = 3, .mean = 50,
                             .std = 2};
    l = oar_loader_new(ds, &o);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_tensor_item(oar_sum(oar_eq(x, oar_scalar(-25.0)), 0, NULL, false)) > 0);
    oar_loader_free(l);
    oar_pool_pop(pool);

    oar_dataset *flat = image_ds(4);
    oar_pool *p2 = oar_pool_push();
    oar_dataset *vec = oar_dataset_new(oar_zeros(OAR_F32, 2, (int64_t[]){4, 3}),
                                       oar_zeros(OAR_I64, 1, (int64_t[]){4}));
    oar_pool_pop(p2);
    CHECK_FAILS(oar_loader_new(vec, &(oar_loader_options){.batch_size = 2, .random_hflip = true}),
                "need samples of at least 2 dims");
    CHECK_FAILS(oar_loader_new(flat, &(oar_loader_options){.batch_size = 2,
                                                           .random_crop_padding = -1}),
                "random_crop_padding -1");
    CHECK_STATUS_FAILS(oar_loader_set_epoch(NULL, 0), "loader is NULL");
    oar_loader *l2 = oar_loader_new(flat, &(oar_loader_options){.batch_size = 2});
    CHECK_STATUS_FAILS(oar_loader_set_epoch(l2, -1), "must be >= 0");
    oar_loader_free(l2);
    oar_dataset_free(vec);
    oar_dataset_free(flat);
    oar_dataset_free(ds);
}

/* A user transform: adds a seeded value in [0, 1) and counts calls; fails
 * on a chosen sample. */
typedef struct hook_ctx {
    int calls;
    int64_t fail_on; /* -1: never */
} hook_ctx;

static int add_noise(void *vctx, float *x, int ndim, const int64_t *shape, uint64_t seed) {
    hook_ctx *c = vctx;
    __atomic_add_fetch(&c->calls, 1, __ATOMIC_RELAXED);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if ((int64_t)x[0] % 100 == 1 && c->fail_on >= 0 && (int64_t)x[0] / 100 == c->fail_on) return 7;
    for (int64_t i = 0; i < n; i++)
        x[i] += (float)((seed >> 11) * 0x1.0p-53);
    return 0;
}

/* Every batch of three epochs, as flat arrays, with or without prefetch. */
static int run_epochs(const oar_dataset *ds, bool prefetch, hook_ctx *ctx, double **xs,
                      double **ys) {
    oar_loader_options o = {.batch_size = 7, .shuffle = true, .seed = 5, .random_crop_padding = 1,
                            .random_hflip = true, .transform = add_noise, .transform_ctx = ctx,
                            .prefetch = prefetch};
    oar_loader *l = oar_loader_new(ds, &o);
    int nb = 0;
    for (int e = 0; e < 3; e++) {
        oar_tensor *x, *y;
        oar_pool *pool = oar_pool_push();
        while (oar_loader_next(l, &x, &y) == 1) {
            xs[nb] = test_values(x);
            ys[nb] = test_values(y);
            CHECK(oar_tensor_shape(x)[0] == (nb % 5 == 4 ? 2 : 7));
            nb++;
            /* work on the batch while the next one is prepared */
            oar_tensor_item(oar_sum(oar_matmul(oar_ones(OAR_F32, 2, (int64_t[]){64, 64}),
                                               oar_ones(OAR_F32, 2, (int64_t[]){64, 64})),
                                    0, NULL, false));
        }
        oar_pool_pop(pool);
        CHECK(oar_loader_epoch(l) == e + 1);
    }
    oar_loader_free(l);
    return nb;
}

static void test_prefetch(void) {
    oar_dataset *ds = image_ds(30);
    double *xa[20], *ya[20], *xb[20], *yb[20];
    hook_ctx ca = {0, -1}, cb = {0, -1};
    int na = run_epochs(ds, false, &ca, xa, ya), nb = run_epochs(ds, true, &cb, xb, yb);
    CHECK(na == 15 && nb == 15);
    /* prefetch runs at most one batch ahead */
    CHECK(ca.calls == 90 && cb.calls >= 90 && cb.calls <= 97);
    int same = 1;
    for (int i = 0; i < na && i < nb; i++) {
        int64_t rows = i % 5 == 4 ? 2 : 7;
        same &= !memcmp(xa[i], xb[i], (size_t)rows * 16 * sizeof(double));
        same &= !memcmp(ya[i], yb[i], (size_t)rows * sizeof(double));
        /* the hook ran: values are no longer integers */
        CHECK(xa[i][0] != floor(xa[i][0]) || xa[i][0] == 0);
        free(xa[i]), free(ya[i]), free(xb[i]), free(yb[i]);
    }
    CHECK(same);

    /* a failing transform fails loader_next with its message, with and
     * without prefetch; the loader can be freed (or retried) after */
    for (int pf = 0; pf < 2; pf++) {
        hook_ctx c = {0, 3};
        oar_loader *l = oar_loader_new(ds, &(oar_loader_options){.batch_size = 10, .transform = add_noise,
                                                                .transform_ctx = &c, .prefetch = pf});
        oar_pool *pool = oar_pool_push();
        oar_tensor *x, *y;
        CHECK_STATUS_FAILS(oar_loader_next(l, &x, &y) < 0, "transform failed (status 7) on sample 3 of epoch 0");
        CHECK(x == NULL && y == NULL);
        c.fail_on = -1;
        CHECK(oar_loader_next(l, &x, &y) == 1);
        CHECK_VALUES(y, ((double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), 10, 0);
        CHECK(oar_loader_next(l, &x, &y) == 1);
        oar_pool_pop(pool);
        oar_loader_free(l); /* with a batch in flight */
    }
    /* set_epoch with prefetch running restarts the order there */
    oar_loader *l = oar_loader_new(ds, &(oar_loader_options){.batch_size = 30, .shuffle = true,
                                                            .seed = 2, .prefetch = true});
    oar_pool *pool = oar_pool_push();
    oar_tensor *x, *y, *e0;
    CHECK(oar_loader_next(l, &x, &y) == 1);
    e0 = oar_clone(y);
    CHECK(oar_loader_next(l, &x, &y) == 0);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_tensor_item(oar_sum(oar_ne(e0, y), 0, NULL, false)) > 0);
    CHECK(oar_loader_set_epoch(l, 0) == 0);
    CHECK(oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_tensor_item(oar_sum(oar_ne(e0, y), 0, NULL, false)) == 0);
    for (int k = 0; k < 30; k++)
        CHECK(oar_loader_index(l, k) == (int64_t)oar_tensor_item(oar_slice(y, 0, k, k + 1, 1)));
    oar_pool_pop(pool);
    oar_loader_free(l);
    /* a prefetching loader never started, and an empty dataset */
    oar_loader_free(oar_loader_new(ds, &(oar_loader_options){.batch_size = 4, .prefetch = true}));
    oar_dataset_free(ds);
    CHECK(oar_loader_sample_seed(1, 0, 0) != oar_loader_sample_seed(1, 0, 1));
    CHECK(oar_loader_sample_seed(1, 0, 0) != oar_loader_sample_seed(1, 1, 0));
    CHECK(oar_loader_sample_seed(1, 0, 0) != oar_loader_sample_seed(2, 0, 0));
}

/* A transform that sleeps 1 ms per sample: producing a batch of 4 takes
 * at least 4 ms, which a synchronous loader's caller waits out. */
static int slow(void *ctx, float *x, int ndim, const int64_t *shape, uint64_t seed) {
    (void)ctx, (void)x, (void)ndim, (void)shape, (void)seed;
    usleep(1000);
    return 0;
}

static void test_wait_seconds(void) {
    oar_dataset *ds = image_ds(8);
    oar_loader *l = oar_loader_new(ds, &(oar_loader_options){.batch_size = 4, .transform = slow});
    CHECK(oar_loader_wait_seconds(l) == 0);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x, *y;
    CHECK(oar_loader_next(l, &x, &y) == 1 && oar_loader_next(l, &x, &y) == 1);
    CHECK(oar_loader_wait_seconds(l) >= 8e-3);
    oar_pool_pop(pool);
    oar_loader_free(l);
    oar_dataset_free(ds);
    CHECK_STATUS_FAILS(oar_loader_wait_seconds(NULL) < 0, "loader is NULL");
}

/* Every allocation of a CSV load and a prefetching, augmenting loader's
 * life fails in turn: each failure is reported as out of memory, nothing
 * crashes, and ASan sees no leak. */
static long alloc_calls, fail_at;

static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    (void)ctx, (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (__atomic_add_fetch(&alloc_calls, 1, __ATOMIC_RELAXED) == fail_at) return NULL;
    return realloc(ptr, new_size);
}

static void test_alloc_failures(void) {
    const char *csv = write_text("oom.csv", "1,2\n3,4\n5,6\n");
    oar_dataset *ds = image_ds(9);
    int bad = 0, completed = 0;
    for (fail_at = 1; fail_at < 5000 && !completed; fail_at++) {
        alloc_calls = 0;
        oar_clear_error();
        oar_set_allocator(failing_alloc, NULL);
        oar_pool *pool = oar_pool_push();
        int st = oar_csv_load(csv, NULL) == NULL;
        oar_loader *l = st ? NULL
                           : oar_loader_new(ds, &(oar_loader_options){.batch_size = 4, .shuffle = true,
                                                                      .random_hflip = true,
                                                                      .prefetch = true});
        st = st || !l;
        oar_tensor *x, *y;
        for (int k = 0; k < 5 && !st; k++)
            st = oar_loader_next(l, &x, &y) < 0;
        oar_loader_free(l);
        oar_pool_pop(pool);
        oar_set_allocator(NULL, NULL);
        if (!st && alloc_calls < fail_at)
            completed = 1;
        else if (st && !strstr(oar_last_error(), "out of memory") && bad++ < 3)
            fprintf(stderr, "failing allocation %ld: %s\n", fail_at, oar_last_error());
    }
    CHECK(completed && bad == 0);
    CHECK(fail_at > 10);
    oar_dataset_free(ds);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/oar_loader_test_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    RUN(test_csv);
    RUN(test_augment);
    RUN(test_prefetch);
    RUN(test_wait_seconds);
    RUN(test_alloc_failures);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return test_summary();
}

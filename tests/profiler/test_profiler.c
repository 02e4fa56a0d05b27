/* The profiler: a training step's Chrome trace parses and holds the
 * expected events; the summary counts calls; recordings restart cleanly;
 * bad input and wrong states fail with a message; threads record without
 * losing events; OAR_PROFILE profiles a child process; a failing allocator
 * while recording neither crashes, leaks nor overwrites the op's error. */
#include "test.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <cjson/cJSON.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include "alloc_fail.h"
#include "core/save.h" /* oari_file_fault */
#include <errno.h>

static int fail_rename(oari_file_step step, const char *path) {
    (void)path;
    return step == OARI_FILE_RENAME ? EXDEV : 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static cJSON *load_trace(const char *path) {
    char *s = read_file(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

/* Number of events with this phase, and (when not NULL) name and cat. */
static int count_events(const cJSON *trace, const char *ph, const char *name, const char *cat) {
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(trace, "traceEvents");
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "cat");
        if (!cJSON_IsString(p) || strcmp(p->valuestring, ph)) continue;
        if (name && (!cJSON_IsString(nm) || strcmp(nm->valuestring, name))) continue;
        if (cat && (!cJSON_IsString(c) || strcmp(c->valuestring, cat))) continue;
        n++;
    }
    return n;
}

static const oar_profiler_stat *find_stat(const oar_profiler_stat *s, int n, oar_profiler_kind k,
                                          const char *name) {
    for (int i = 0; i < n; i++)
        if (s[i].kind == k && !strcmp(s[i].name, name)) return &s[i];
    return NULL;
}

static void trace_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/oar_test_profiler_%ld_%s.json", (long)getpid(), tag);
}

/* Before anything is recorded, and every wrong state and argument. */
static void test_errors(void) {
    oar_profiler_stat st[4];
    oar_profiler_totals tot;
    char buf[64];
    CHECK_STATUS_FAILS(oar_profiler_stop(), "not recording");
    CHECK_STATUS_FAILS(oar_profiler_write_trace("/tmp/never.json"), "nothing recorded");
    CHECK(oar_profiler_stats(st, 4) == OAR_ERR_STATE);
    CHECK(oar_profiler_summary(buf, sizeof buf) == OAR_ERR_STATE);
    CHECK_STATUS_FAILS(oar_profiler_totals_get(&tot), "nothing recorded");
    CHECK(!oar_profiler_is_recording());

    CHECK(oar_profiler_start() == 0);
    CHECK(oar_profiler_is_recording());
    CHECK_STATUS_FAILS(oar_profiler_start(), "already recording");
    CHECK_STATUS_FAILS(oar_profiler_write_trace("/tmp/never.json"), "is recording");
    CHECK(oar_profiler_stats(st, 4) == OAR_ERR_STATE);
    CHECK_STATUS_FAILS(oar_profiler_reset(), "is recording");
    /* an op failing while recording keeps its own message */
    oar_pool *p = oar_pool_push();
    int64_t sa[1] = {3}, sb[1] = {4};
    CHECK_FAILS(oar_add(oar_zeros(OAR_F32, 1, sa), oar_zeros(OAR_F32, 1, sb)), "add");
    oar_pool_pop(p);
    CHECK(oar_profiler_stop() == 0);
    CHECK_STATUS_FAILS(oar_profiler_stop(), "not recording");

    CHECK_STATUS_FAILS(oar_profiler_write_trace(NULL), "NULL");
    CHECK_STATUS_FAILS(oar_profiler_write_trace(""), "empty");
    oar_clear_error();
    CHECK(oar_profiler_write_trace("/nonexistent-dir/trace.json") == OAR_ERR_IO);
    CHECK(strstr(oar_last_error(), "cannot write /nonexistent-dir/trace.json") != NULL);
    CHECK_STATUS_FAILS(oar_profiler_totals_get(NULL), "NULL");
    CHECK_STATUS_FAILS(oar_profiler_summary_write(NULL), "NULL");
    CHECK(oar_profiler_summary(NULL, 8) == OAR_ERR_INVALID);
    CHECK(oar_profiler_stats(NULL, 2) == OAR_ERR_INVALID);
    CHECK(oar_profiler_stats(st, -1) == OAR_ERR_INVALID);
    CHECK(oar_profiler_stats(NULL, 0) >= 0);
}

/* A forward, backward and optimizer step of a small MLP fed by a loader. */
static void test_training_step_trace(void) {
    oar_manual_seed(3);
    int64_t sx[2] = {16, 4}, sy[1] = {16}, sw1[2] = {4, 8}, sb1[1] = {8}, sw2[2] = {8, 3};
    oar_tensor *x = oar_randn(OAR_F32, 2, sx), *y = oar_randint(0, 3, OAR_I64, 1, sy);
    oar_tensor *w1 = oar_randn(OAR_F32, 2, sw1), *b1 = oar_randn(OAR_F32, 1, sb1);
    oar_tensor *w2 = oar_randn(OAR_F32, 2, sw2);
    oar_tensor *params[3] = {w1, b1, w2};
    for (int i = 0; i < 3; i++) oar_tensor_set_requires_grad(params[i], true);
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_loader *ld = oar_loader_new(ds, &(oar_loader_options){.batch_size = 8});
    oar_optimizer *opt = oar_sgd_new(3, params, &(oar_sgd_options){.lr = 0.1});
    CHECK(ds && ld && opt);

    CHECK(oar_profiler_start() == 0);
    oar_pool *p = oar_pool_push();
    oar_tensor *xb, *yb;
    CHECK(oar_loader_next(ld, &xb, &yb) == 1);
    oar_tensor *h = oar_relu(oar_add(oar_matmul(xb, w1), b1));
    oar_tensor *loss = oar_cross_entropy(oar_matmul(h, w2), yb, NULL, -100, 0.0,
                                         OAR_REDUCTION_MEAN);
    CHECK(loss && oar_backward(loss, NULL) == 0);
    CHECK(oar_optim_step(opt) == 0);
    oar_optim_zero_grad(opt);
    oar_pool_pop(p);
    CHECK(oar_profiler_stop() == 0);

    oar_profiler_stat st[256];
    int n = oar_profiler_stats(st, 256);
    CHECK(n > 5 && n <= 256);
    if (n > 256) n = 256;
    const oar_profiler_stat *mm = find_stat(st, n, OAR_PROFILER_OP, "matmul");
    const oar_profiler_stat *mmb = find_stat(st, n, OAR_PROFILER_BACKWARD, "matmul");
    const oar_profiler_stat *os = find_stat(st, n, OAR_PROFILER_OPTIM, "optim_step");
    const oar_profiler_stat *ln = find_stat(st, n, OAR_PROFILER_DATA, "loader_next");
    CHECK(mm && mm->calls >= 2);
    CHECK(mmb && mmb->calls == 2);
    CHECK(os && os->calls == 1);
    CHECK(ln && ln->calls == 1);
    CHECK(find_stat(st, n, OAR_PROFILER_BACKWARD, "relu") != NULL);
    int64_t calls = 0;
    double self_share = 0;
    for (int i = 0; i < n; i++) {
        calls += st[i].calls;
        self_share += st[i].self_share;
        CHECK(st[i].self_ns >= 0 && st[i].self_ns <= st[i].total_ns);
        CHECK(st[i].min_ns <= st[i].max_ns && st[i].min_ns * st[i].calls <= st[i].total_ns);
        CHECK(st[i].share >= 0 && st[i].share <= 1.0 + 1e-9);
        if (i) CHECK(st[i - 1].total_ns >= st[i].total_ns);
    }
    /* one thread: self times do not overlap; a backward node holds its rule's ops */
    CHECK(self_share > 0 && self_share <= 1.0 + 1e-9);
    CHECK(mmb && mmb->self_ns < mmb->total_ns);
    oar_profiler_totals tot;
    CHECK(oar_profiler_totals_get(&tot) == 0);
    CHECK(tot.n_events == calls);
    CHECK(tot.n_dropped == 0 && tot.n_threads >= 1 && tot.wall_ns > 0);
    CHECK(tot.n_allocs > 0 && tot.n_frees > 0);
    CHECK(tot.peak_bytes >= tot.start_bytes && tot.peak_bytes > 0);

    char path[128];
    trace_path(path, sizeof path, "step");
    /* on the save protocol: a rename that fails leaves the old file whole */
    FILE *old = fopen(path, "w");
    CHECK(old && fputs("old trace\n", old) >= 0 && fclose(old) == 0);
    oari_file_fault = fail_rename;
    CHECK_STATUS_FAILS(oar_profiler_write_trace(path), "renaming");
    oari_file_fault = NULL;
    char back[32] = {0};
    old = fopen(path, "r");
    CHECK(old && fgets(back, sizeof back, old) && !strcmp(back, "old trace\n"));
    if (old) fclose(old);
    CHECK(oar_profiler_write_trace(path) == 0);
    cJSON *j = load_trace(path);
    CHECK(j != NULL);
    if (j) {
        CHECK(count_events(j, "X", NULL, NULL) == calls);
        CHECK(count_events(j, "X", "matmul", "op") == mm->calls);
        CHECK(count_events(j, "X", "matmul_backward", "backward") == 2);
        CHECK(count_events(j, "X", "optim_step", "optim") == 1);
        CHECK(count_events(j, "X", "loader_next", "data") == 1);
        CHECK(count_events(j, "C", "memory", NULL) >= tot.n_allocs + tot.n_frees);
        CHECK(count_events(j, "M", "thread_name", NULL) >= 1);
        CHECK(count_events(j, "M", "process_name", NULL) == 1);
        /* every complete event is well-formed; the first matmul saw [8, 4] x [4, 8] */
        const cJSON *e;
        bool first_mm = true, well_formed = true;
        size_t peak = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
            const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "ph"));
            const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
            if (ph && !strcmp(ph, "C")) {
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(args, "bytes_in_use");
                well_formed = well_formed && cJSON_IsNumber(b) && cJSON_IsNumber(ts);
                if (cJSON_IsNumber(b) && (size_t)b->valuedouble > peak) peak = (size_t)b->valuedouble;
            }
            if (!ph || strcmp(ph, "X")) continue;
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
            well_formed = well_formed && cJSON_IsNumber(ts) && ts->valuedouble >= 0 &&
                          cJSON_IsNumber(dur) && dur->valuedouble >= 0 &&
                          cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "pid")) &&
                          cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "tid"));
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
            if (name && !strcmp(name, "matmul") && first_mm) {
                first_mm = false;
                char *in = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(e, "args"), "inputs"));
                CHECK(in && !strcmp(in, "[[8,4],[4,8]]"));
                if (in && strcmp(in, "[[8,4],[4,8]]")) fprintf(stderr, "inputs: %s\n", in);
                cJSON_free(in);
            }
        }
        CHECK(well_formed);
        CHECK(peak == tot.peak_bytes);
        cJSON_Delete(j);
    }
    remove(path);

    char text[8192];
    int len = oar_profiler_summary(text, sizeof text);
    CHECK(len > 0 && (size_t)len < sizeof text);
    CHECK(strstr(text, "matmul") && strstr(text, "optim_step") && strstr(text, "loader_next"));
    CHECK(strstr(text, "memory: peak") != NULL);

    oar_optim_free(opt);
    oar_loader_free(ld);
    oar_dataset_free(ds);
    for (int i = 0; i < 3; i++) oar_tensor_release(params[i]);
    oar_tensor_release(x);
    oar_tensor_release(y);
}

/* Three adds and two muls are five rows of calls; the text forms agree. */
static void test_summary_counts(void) {
    int64_t s[2] = {3, 5};
    oar_tensor *a = oar_randn(OAR_F32, 2, s), *b = oar_randn(OAR_F32, 2, s);
    CHECK(oar_profiler_start() == 0);
    oar_pool *p = oar_pool_push();
    for (int i = 0; i < 3; i++) CHECK(oar_add(a, b) != NULL);
    for (int i = 0; i < 2; i++) CHECK(oar_mul(a, b) != NULL);
    oar_pool_pop(p);
    CHECK(oar_profiler_stop() == 0);
    oar_profiler_stat st[8];
    CHECK(oar_profiler_stats(st, 8) == 2);
    const oar_profiler_stat *add = find_stat(st, 2, OAR_PROFILER_OP, "add");
    const oar_profiler_stat *mul = find_stat(st, 2, OAR_PROFILER_OP, "mul");
    CHECK(add && add->calls == 3);
    CHECK(mul && mul->calls == 2);
    CHECK(oar_profiler_stats(st, 1) == 2); /* the count even when cap is short */

    int len = oar_profiler_summary(NULL, 0);
    CHECK(len > 0);
    char *full = malloc((size_t)len + 1), small[10];
    CHECK(oar_profiler_summary(full, (size_t)len + 1) == len);
    CHECK(strlen(full) == (size_t)len);
    CHECK(oar_profiler_summary(small, sizeof small) == len);
    CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, full, sizeof small - 1));
    FILE *f = tmpfile();
    CHECK(f && oar_profiler_summary_write(f) == 0);
    char *back = calloc(1, (size_t)len + 16);
    if (f) {
        rewind(f);
        size_t got = fread(back, 1, (size_t)len + 15, f);
        CHECK(got == (size_t)len && !strcmp(back, full));
        fclose(f);
    }
    /* "op add 3" on one line */
    const char *line = strstr(full, "\nop        add ");
    CHECK(line != NULL);
    if (line) CHECK(atoi(line + 1 + 9 + 27) == 3);
    free(back);
    free(full);
    oar_tensor_release(a);
    oar_tensor_release(b);
}

/* A second recording holds only its own events; reset frees and restarts. */
static void test_start_stop_twice(void) {
    int64_t s[1] = {7};
    oar_tensor *a = oar_randn(OAR_F32, 1, s);
    oar_profiler_stat st[8];
    for (int round = 0; round < 3; round++) {
        CHECK(oar_profiler_start() == 0);
        oar_pool *p = oar_pool_push();
        for (int i = 0; i <= round; i++) CHECK(oar_neg(a) != NULL);
        oar_pool_pop(p);
        CHECK(oar_profiler_stop() == 0);
        CHECK(oar_profiler_stats(st, 8) == 1);
        CHECK(st[0].kind == OAR_PROFILER_OP && !strcmp(st[0].name, "neg"));
        CHECK(st[0].calls == round + 1);
        if (round == 1) {
            CHECK(oar_profiler_reset() == 0);
            CHECK(oar_profiler_stats(st, 8) == OAR_ERR_STATE);
        }
    }
    oar_tensor_release(a);
}

/* Threads record at once, each into its own buffer: no call is lost. */
#define N_THREADS 4
#define CALLS_PER_THREAD 3000 /* several chunks per thread */

static oar_tensor *shared_in;

/* No pools here: a thread's recycled pools are not freed at its exit. */
static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        oar_tensor *r = oar_exp(shared_in);
        if (!r) break;
        oar_tensor_release(r);
    }
    return NULL;
}

static void test_threads(void) {
    int64_t s[1] = {16};
    shared_in = oar_randn(OAR_F32, 1, s);
    CHECK(oar_profiler_start() == 0);
    pthread_t t[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    worker(NULL);
    for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
    CHECK(oar_profiler_stop() == 0);
    oar_profiler_stat st[8];
    int n = oar_profiler_stats(st, 8);
    const oar_profiler_stat *e = find_stat(st, n < 8 ? n : 8, OAR_PROFILER_OP, "exp");
    CHECK(e && e->calls == (int64_t)(N_THREADS + 1) * CALLS_PER_THREAD);
    oar_profiler_totals tot;
    CHECK(oar_profiler_totals_get(&tot) == 0);
    CHECK(tot.n_threads == N_THREADS + 1);
    char path[128];
    trace_path(path, sizeof path, "threads");
    CHECK(oar_profiler_write_trace(path) == 0);
    cJSON *j = load_trace(path);
    CHECK(j && count_events(j, "M", "thread_name", NULL) == N_THREADS + 1);
    CHECK(j && count_events(j, "X", "exp", "op") == (N_THREADS + 1) * CALLS_PER_THREAD);
    cJSON_Delete(j);
    remove(path);
    oar_tensor_release(shared_in);
}

/* The size of the calling thread's team. */
static int openmp_team(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* Whether the environment may give a region of `asked` threads fewer
 * (OMP_DYNAMIC, a thread limit below it; no OpenMP at all). */
static bool teams_may_shrink(int asked) {
#ifdef _OPENMP
    return omp_get_dynamic() || omp_get_thread_limit() < asked;
#else
    (void)asked;
    return true;
#endif
}

/* The same from an OpenMP team (the threads the kernels run on). */
static void test_openmp_threads(void) {
    int64_t s[1] = {16};
    oar_tensor *in = oar_randn(OAR_F32, 1, s);
    CHECK(oar_profiler_start() == 0);
    int failed = 0, team = 0;
#pragma omp parallel num_threads(3) reduction(+ : failed)
    {
#pragma omp single
        team = openmp_team();
        for (int i = 0; i < 500; i++) {
            oar_tensor *r = oar_neg(in);
            failed += !r;
            oar_tensor_release(r);
        }
    }
    CHECK(oar_profiler_stop() == 0);
    CHECK(failed == 0);
    oar_profiler_stat st[4];
    int n = oar_profiler_stats(st, 4);
    CHECK(n == 1 && st[0].kind == OAR_PROFILER_OP && !strcmp(st[0].name, "neg"));
    CHECK(team == 3 || (teams_may_shrink(3) && team >= 1 && team < 3));
    CHECK(n >= 1 && st[0].calls == team * 500);
    oar_profiler_totals tot;
    CHECK(oar_profiler_totals_get(&tot) == 0 && tot.n_allocs == team * 500 && tot.n_frees == team * 500);
    oar_tensor_release(in);
}

/* The child of test_env_profile: a few ops, profiled by OAR_PROFILE. */
static int child_main(void) {
    if (!oar_profiler_is_recording()) return 2;
    int64_t s[1] = {5};
    oar_pool *p = oar_pool_push();
    oar_tensor *a = oar_randn(OAR_F32, 1, s);
    for (int i = 0; i < 3; i++) a = oar_add(a, a);
    int ok = a != NULL;
    oar_pool_pop(p);
    return ok ? 0 : 3; /* the trace is written at exit */
}

/* Runs this program as a child with OAR_PROFILE=value and stderr to a
 * file; returns its exit status (-1 if it did not exit). */
static int run_child(const char *value, const char *err_path) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OAR_PROFILE", value, 1);
        if (!freopen(err_path, "w", stderr)) _exit(5);
        execl("/proc/self/exe", "test_profiler", "--child", (char *)NULL);
        _exit(4);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static void test_env_profile(void) {
    char path[128], err[128];
    trace_path(path, sizeof path, "env");
    trace_path(err, sizeof err, "env_stderr");
    remove(path);
    CHECK(run_child(path, err) == 0);
    cJSON *j = load_trace(path);
    CHECK(j != NULL);
    CHECK(j && count_events(j, "X", "add", "op") == 3);
    CHECK(j && count_events(j, "M", "thread_name", NULL) == 1);
    cJSON_Delete(j);
    char *text = read_file(err);
    CHECK(text && strstr(text, "wrote") && strstr(text, "oar profile:") && strstr(text, "add"));
    free(text);
    remove(path);

    /* an unwritable path: the program still runs and exits normally, and says why */
    CHECK(run_child("/nonexistent-dir/trace.json", err) == 0);
    text = read_file(err);
    CHECK(text && strstr(text, "not writable") && strstr(text, "cannot write /nonexistent-dir/trace.json"));
    free(text);
    remove(err);
}

/* ---- a failing allocator while recording ---- */

static void test_failing_allocator(void) {
    CHECK(oar_profiler_reset() == 0); /* buffers freed through the hook that made them */
    oar_memory_empty_cache();
    oar_set_allocator(failing_alloc, NULL);
    int64_t s[2] = {4, 4};
    int profiler_drops = 0, op_failures = 0, clean = 0;
    for (long n = -1; n < 60; n++) { /* n = -1: a warm-up without failures */
        long base = live;
        n_calls = 0;
        fail_at = n;
        oar_clear_error();
        CHECK(oar_profiler_start() == 0);
        oar_pool *p = oar_pool_push();
        oar_tensor *y = p ? oar_exp(oar_add(oar_ones(OAR_F32, 2, s), oar_ones(OAR_F32, 2, s))) : NULL;
        if (y) {
            /* the profiler ran out, not the op: no message may be left */
            CHECK(oar_last_error()[0] == 0);
            CHECK(oar_tensor_numel(y) == 16);
        } else {
            CHECK(strstr(oar_last_error(), "out of memory") != NULL);
            op_failures++;
        }
        if (p) oar_pool_pop(p);
        CHECK(oar_profiler_stop() == 0);
        fail_at = -1;
        oar_profiler_totals tot;
        int st = oar_profiler_totals_get(&tot);
        CHECK(st == 0);
        if (!st && tot.n_dropped) profiler_drops++;
        if (!st && !tot.n_dropped && y) clean++;
        CHECK(oar_profiler_reset() == 0);
        oar_memory_empty_cache();
        if (n >= 0) CHECK(live == base);
    }
    CHECK(profiler_drops > 0 && op_failures > 0 && clean > 0);
    oar_set_allocator(NULL, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--child")) return child_main();
    if (oar_profiler_start() == OAR_ERR_UNSUPPORTED) {
        printf("skip: profiler compiled out (OARI_PROF_DISABLED)\n");
        return 77;
    }
    CHECK(oar_profiler_stop() == 0);
    CHECK(oar_profiler_reset() == 0);
    RUN(test_errors);
    RUN(test_training_step_trace);
    RUN(test_summary_counts);
    RUN(test_start_stop_twice);
    RUN(test_threads);
    RUN(test_openmp_threads);
    RUN(test_env_profile);
    RUN(test_failing_allocator);
    return test_summary();
}

/* Products, convolutions and factorizations that reach OpenBLAS, oneDNN
 * and LAPACK, when an OpenMP team comes out smaller than
 * omp_get_max_threads() says (oari_lib_enter in src/backends/cpu/cpu.h).
 * Those libraries split a call for omp_get_max_threads() threads: before
 * the guard, oneDNN's sgemm left a missing thread's rows unwritten and
 * OpenBLAS's threaded dgemm spun for ever. Three ways to a small team:
 *   - dynamic teams (omp_set_dynamic) in a process bound to one CPU, where
 *     libgomp gives every region one thread;
 *   - OMP_THREAD_LIMIT=1 under OMP_NUM_THREADS=2 (read at start: the test
 *     runs itself again with them set);
 *   - a call from inside the application's own parallel region (nested
 *     regions get one thread; the libraries see it and stay on one), and
 *     from inside a region of one thread (`if (0)`), where a library's team
 *     would be a nested one.
 * Each result is checked against the same call on one thread, and the
 * caller's thread count and dynamic setting are checked to come back.
 * And no call creates a thread once the pool exists: a library team
 * nested in one of oar's regions of one thread (a batched product of
 * large matrices, a small convolution) made libgomp create its threads
 * again at every call (70 us, and 3 ms while the pool's idle worker spun
 * on the other core). This test's pthread_create, which libgomp's calls
 * bind to, counts the threads created. */
#define _GNU_SOURCE
#include "test.h"

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_ENV "OAR_TEST_OMP_TEAMS_CHILD"

/* Threads created in this process (libgomp's included: the executable's
 * definition comes first in the lookup), then the next definition's call
 * (libc's, or a sanitizer's interceptor). */
static int threads_created;
typedef int create_fn(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    static create_fn *next;
    if (!next) {
        void *sym = dlsym(RTLD_NEXT, "pthread_create");
        memcpy(&next, &sym, sizeof next);
    }
    __atomic_add_fetch(&threads_created, 1, __ATOMIC_RELAXED);
    return next(t, attr, start, arg);
}
static int created(void) { return __atomic_load_n(&threads_created, __ATOMIC_RELAXED); }

static double uniform(void) {
    static uint64_t s = 0x9e3779b97f4a7c15u;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (double)(s >> 11) / 9007199254740992.0;
}

static oar_tensor *rand_t(oar_dtype dt, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = 2 * uniform() - 1;
    oar_tensor *t = oar_cast(oar_tensor_from_data(v, OAR_F64, ndim, shape), dt);
    free(v);
    return t;
}

/* The cases: each above the size where the libraries thread (2^23
 * multiply-adds for products, cpu_linalg.c). */
enum { MM_F32, MM_F64, MM_F64_THIN, MM_C128, MV_F64, CONV_F32, CONV_F64, SOLVE, CHOLESKY, EIGH, SVD,
       N_CASES };
static const char *const case_names[N_CASES] = {"matmul f32",  "matmul f64",   "matmul f64 thin", "matmul c128",
                                                "matvec f64",  "conv2d f32",   "conv2d f64",      "solve f64",
                                                "cholesky f64", "eigh f64",     "svdvals f64"};
static oar_tensor *A32, *B32, *A64, *B64, *T64a, *T64b, *A128, *B128, *M64, *V64, *X32, *W32, *SPD, *RHS;

static void make_inputs(void) {
    A32 = rand_t(OAR_F32, 2, (int64_t[]){512, 384});
    B32 = rand_t(OAR_F32, 2, (int64_t[]){384, 512});
    A64 = oar_cast(A32, OAR_F64);
    B64 = oar_cast(B32, OAR_F64);
    T64a = rand_t(OAR_F64, 2, (int64_t[]){100, 1000}); /* rows and columns too few to split: OpenBLAS's threads */
    T64b = rand_t(OAR_F64, 2, (int64_t[]){1000, 100});
    A128 = oar_complex(rand_t(OAR_F64, 2, (int64_t[]){256, 256}), rand_t(OAR_F64, 2, (int64_t[]){256, 256}));
    B128 = oar_complex(rand_t(OAR_F64, 2, (int64_t[]){256, 256}), rand_t(OAR_F64, 2, (int64_t[]){256, 256}));
    M64 = rand_t(OAR_F64, 2, (int64_t[]){1536, 1536});
    V64 = rand_t(OAR_F64, 1, (int64_t[]){1536});
    X32 = rand_t(OAR_F32, 4, (int64_t[]){4, 32, 28, 28});
    W32 = rand_t(OAR_F32, 4, (int64_t[]){64, 32, 3, 3});
    oar_tensor *m = rand_t(OAR_F64, 2, (int64_t[]){400, 400});
    RHS = rand_t(OAR_F64, 2, (int64_t[]){400, 64});
    SPD = oar_add(oar_matmul(m, oar_transpose(m, 0, 1)), oar_mul_scalar(oar_eye(400, 400, OAR_F64), 400.0));
}

static oar_tensor *run_case(int c) {
    const int64_t one[2] = {1, 1};
    switch (c) {
    case MM_F32: return oar_matmul(A32, B32);
    case MM_F64: return oar_matmul(A64, B64);
    case MM_F64_THIN: return oar_matmul(T64a, T64b);
    case MM_C128: return oar_matmul(A128, B128);
    case MV_F64: return oar_matmul(M64, V64);
    case CONV_F32: return oar_conv2d(X32, W32, NULL, one, one, one, 1);
    case CONV_F64: return oar_conv2d(oar_cast(X32, OAR_F64), oar_cast(W32, OAR_F64), NULL, one, one, one, 1);
    case SOLVE: return oar_linalg_solve(SPD, RHS);
    case CHOLESKY: return oar_linalg_cholesky(SPD, false);
    case EIGH: {
        oar_tensor *w = NULL, *v = NULL;
        return oar_linalg_eigh(SPD, "L", &w, &v) == 0 ? w : NULL;
    }
    case SVD: return oar_linalg_svdvals(oar_slice(SPD, 0, 0, 300, 1));
    }
    return NULL;
}

static double max_abs(oar_tensor *t) { return oar_tensor_item(oar_amax(oar_abs(t), 0, NULL, false)); }

/* Each case's result on one thread. */
static oar_tensor *want[N_CASES];
static void make_references(void) {
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int c = 0; c < N_CASES; c++) want[c] = oar_clone(run_case(c));
    omp_set_num_threads(threads);
}

/* got against case c's one-thread result: 1e-5 of its magnitude in f32
 * (another blocking may round differently), 1e-10 in f64. */
static bool matches(int c, oar_tensor *got) {
    if (!got || !want[c]) return false;
    double mag = max_abs(want[c]), err = max_abs(oar_sub(got, want[c]));
    double tol = (c == MM_F32 || c == CONV_F32 ? 1e-5 : 1e-10) * mag;
    if (!(err <= tol)) fprintf(stderr, "%s: off by %g (magnitude %g)\n", case_names[c], err, mag);
    return err <= tol;
}

/* Runs every case; checks its values and that the caller's ICVs came back. */
static void check_all_cases(void) {
    int threads = omp_get_max_threads(), dynamic = omp_get_dynamic();
    for (int c = 0; c < N_CASES; c++) {
        CHECK(matches(c, run_case(c)));
        CHECK(omp_get_max_threads() == threads && omp_get_dynamic() == dynamic);
    }
}

/* The size of the team a parallel region gets now. */
static int team_size(void) {
    int n = 0;
#pragma omp parallel
    {
#pragma omp single
        n = omp_get_num_threads();
    }
    return n;
}

static void test_dynamic_on_one_cpu(void) {
    cpu_set_t saved, one;
    CHECK(sched_getaffinity(0, sizeof saved, &saved) == 0);
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &saved)) {
            CPU_SET(cpu, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    omp_set_num_threads(2);
    omp_set_dynamic(1);
    CHECK(team_size() == 1); /* libgomp: no more threads than CPUs (the case under test) */
    check_all_cases();
    omp_set_dynamic(0);
    CHECK(sched_setaffinity(0, sizeof saved, &saved) == 0);
}

static void test_inside_parallel_region(void) {
    omp_set_num_threads(2);
    int ok[2] = {0, 0}, team = 0;
#pragma omp parallel num_threads(2)
    {
        int t = omp_get_thread_num(), good = 1;
        oar_pool *pool = oar_pool_push(); /* (each thread's own) */
        for (int c = 0; c < N_CASES; c++) good = good && matches(c, run_case(c));
        oar_pool_pop(pool);
        ok[t] = good;
#pragma omp single
        team = omp_get_num_threads();
    }
    /* two, unless the caller's environment shrinks teams (OMP_DYNAMIC, a thread limit) */
    CHECK(team == 2 || ((omp_get_dynamic() || omp_get_thread_limit() < 2) && team == 1));
    for (int t = 0; t < team; t++) CHECK(ok[t]);
}

/* Every case from inside a region of one thread (`if (0)`). A library
 * called there runs on that one thread: its own team would be a nested
 * one, with threads created for it at every call (before, eigh created
 * 948 here, svdvals 1379). The cases that reach a library with no region
 * of oar's around it must create none; oar's own regions (the f64 and
 * c128 products split into blocks, the convs) still nest (docs/internals/
 * cpu.md). */
static void test_inside_region_of_one(void) {
    static const bool library_only[N_CASES] = {[MM_F32] = true, [MM_F64_THIN] = true, [MV_F64] = true,
                                               [SOLVE] = true,  [CHOLESKY] = true,    [EIGH] = true,
                                               [SVD] = true};
    omp_set_num_threads(2);
    team_size();
    int good = 1, made[N_CASES] = {0};
#pragma omp parallel if (0)
    for (int c = 0; c < N_CASES; c++) {
        int before = created();
        oar_tensor *got = run_case(c);
        made[c] = created() - before;
        good = good && matches(c, got);
    }
    CHECK(good);
    CHECK(omp_get_max_threads() == 2);
    for (int c = 0; c < N_CASES; c++) {
        if (library_only[c] && made[c]) fprintf(stderr, "%s created %d threads\n", case_names[c], made[c]);
        CHECK(!library_only[c] || made[c] == 0);
    }
}

/* Calls that go through one of oar's regions of one thread, or used to:
 * none may create a thread once the pool has its two. */
static void test_no_thread_per_call(void) {
    omp_set_num_threads(3); /* growing the pool creates a thread: the count works */
    int before = created();
    CHECK(team_size() == 3 || omp_get_dynamic() || omp_get_thread_limit() < 3);
    CHECK(created() > before || omp_get_dynamic() || omp_get_thread_limit() < 3);
    omp_set_num_threads(2);
    team_size();
    oar_tensor *ba = rand_t(OAR_F32, 3, (int64_t[]){2, 256, 256}), *bb = rand_t(OAR_F32, 3, (int64_t[]){2, 256, 256});
    oar_tensor *x1 = rand_t(OAR_F32, 4, (int64_t[]){1, 1, 28, 28}), *w1 = rand_t(OAR_F32, 4, (int64_t[]){16, 1, 3, 3});
    oar_tensor *x2 = rand_t(OAR_F32, 4, (int64_t[]){2, 16, 14, 14}), *w2 = rand_t(OAR_F32, 4, (int64_t[]){32, 16, 3, 3});
    oar_tensor *w3 = rand_t(OAR_F32, 4, (int64_t[]){48, 16, 3, 3});
    const int64_t one[2] = {1, 1};
    before = created();
    for (int i = 0; i < 3; i++) {
        oar_pool *pool = oar_pool_push();
        oar_tensor *big = oar_relu(oar_full(OAR_F32, 1, (int64_t[]){1 << 20}, 1.0)); /* a region of two first */
        /* products of 2^24 multiply-adds: one after another, each threaded */
        oar_tensor *p32 = oar_matmul(ba, bb), *p64 = oar_matmul(oar_cast(ba, OAR_F64), oar_cast(bb, OAR_F64));
        /* small convs: one image by im2col + gemm; the demo CNN's second
         * (few channels); Winograd F(2x2) with its tile products in a
         * region of one (too little work for two) */
        oar_tensor *c1 = oar_conv2d(x1, w1, NULL, one, one, one, 1), *c2 = oar_conv2d(x2, w2, NULL, one, one, one, 1);
        oar_tensor *c3 = oar_conv2d(oar_slice(x2, 0, 0, 1, 1), w3, NULL, one, one, one, 1);
        CHECK(big && p32 && p64 && c1 && c2 && c3);
        if (i == 0 && p32 && p64) { /* (the values, once: against f64) */
            CHECK(max_abs(oar_sub(oar_cast(p32, OAR_F64), p64)) < 1e-3);
        }
        oar_pool_pop(pool);
    }
    int n = created() - before;
    if (n) fprintf(stderr, "%d threads created by calls after the pool existed\n", n);
    CHECK(n == 0);
}

static void test_thread_limit(void) {
    CHECK(omp_get_thread_limit() == 1 && omp_get_max_threads() == 2);
    CHECK(team_size() == 1);
    check_all_cases();
}

/* Runs this test again under OMP_THREAD_LIMIT=1 and OMP_NUM_THREADS=2. */
static void test_thread_limit_child(void) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(len > 0);
    if (len <= 0) return;
    exe[len] = 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OMP_THREAD_LIMIT", "1", 1);
        setenv("OMP_NUM_THREADS", "2", 1);
        setenv(CHILD_ENV, "1", 1);
        execl(exe, exe, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "the run under OMP_THREAD_LIMIT=1 %s %d\n", WIFEXITED(status) ? "exited with" : "was killed by signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    /* a library waiting for a thread that never comes fails here, not at the CTest timeout */
    alarm(240);
    oar_pool *pool = oar_pool_push(); /* every tensor below, released at the end */
    make_inputs();
    make_references();
    for (int c = 0; c < N_CASES; c++) CHECK(want[c] != NULL);
    if (getenv(CHILD_ENV)) {
        RUN(test_thread_limit);
        oar_pool_pop(pool);
        return test_summary();
    }
    RUN(test_inside_parallel_region);
    RUN(test_inside_region_of_one);
    RUN(test_no_thread_per_call);
    RUN(test_dynamic_on_one_cpu);
    alarm(0); /* (the run under the limit has its own) */
    RUN(test_thread_limit_child);
    oar_pool_pop(pool);
    return test_summary();
}

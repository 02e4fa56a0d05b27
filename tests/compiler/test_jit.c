/* The JIT layer (src/compiler/jit.c): compile, cache, load, errors.
 *
 * The compiler is probed once per process, so every case that needs another
 * $CC, $OAR_JIT_CFLAGS or a fresh process runs this binary again as a child
 * (`test_jit child <mode> ...`) with its own environment. $CC is wrapped by
 * a shell script that logs each call, so the tests count real compiler
 * runs: a second process loading the same source must not compile.
 * Every load is checked to leave the floating-point control register
 * (MXCSR on x86-64) as it was. */
#define _GNU_SOURCE
#include "test.h"

#include "compiler/jit.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __x86_64__
#include <xmmintrin.h>
#endif

/* ---- sources ----------------------------------------------------------------- */

/* A kernel as the code generator writes them: only the three headers, a
 * vector variant of expf from libmvec, an OpenMP loop. */
#define KERNEL_HEAD                                                                      \
    "#include <math.h>\n#include <stdint.h>\n#include <stddef.h>\n"                      \
    "__attribute__((simd(\"notinbranch\"))) float expf(float);\n"
static const char *SRC_A = KERNEL_HEAD
    "void k_exp_scale(float *restrict out, const float *restrict x, float s, int64_t n) {\n"
    "#pragma omp parallel for simd schedule(static)\n"
    "    for (int64_t i = 0; i < n; i++) out[i] = s * expf(x[i]);\n"
    "}\n";
/* Distinct sources (distinct keys) for the other cases. */
static const char *SRC_RACE = KERNEL_HEAD "/* race */\nint k_race(void) { return 41; }\n";
static const char *SRC_THREADS = KERNEL_HEAD "/* threads */\nint k_threads(void) { return 42; }\n";
static const char *SRC_FTZ = KERNEL_HEAD "/* ftz */\nint k_ftz(void) { return 43; }\n";
static const char *SRC_MACRO = "int k_macro(void) { return OAR_JIT_TEST_K; }\n";
static const char *SRC_BAD = "int k_bad(void) { int x = ; return x; }\n";

typedef void (*exp_scale_fn)(float *, const float *, float, int64_t);
typedef int (*int_fn)(void);

static char self_exe[PATH_MAX], tmp_dir[64], wrap_cc[PATH_MAX], ftz_cc[PATH_MAX],
    calls_log[PATH_MAX];

/* ---- helpers -------------------------------------------------------------------- */

/* The floating-point control state (exception flags left out). */
static unsigned fp_control(void) {
#ifdef __x86_64__
    return _mm_getcsr() & ~0x3fu;
#else
    return (unsigned)fegetround();
#endif
}

/* oari_jit_load, checking that loading left the control register alone. */
static oari_jit_lib *load_checked(const char *src, oari_jit_stats *st) {
    unsigned before = fp_control();
    oari_jit_lib *lib = oari_jit_load(src, st);
    CHECK(fp_control() == before);
    return lib;
}

/* Runs k_exp_scale of lib on a few values and compares with libm. */
static void check_exp_scale(oari_jit_lib *lib) {
    exp_scale_fn f = (exp_scale_fn)oari_jit_symbol(lib, "k_exp_scale");
    CHECK(f != NULL);
    if (!f) return;
    enum { N = 1003 }; /* not a multiple of the vector width */
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -20.0f + 40.0f * (float)i / N;
    f(y, x, 0.5f, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double ref = 0.5 * exp((double)x[i]), rel = fabs(y[i] - ref) / ref;
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 1e-6); /* libmvec's expf: within 4 ulp */
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}
/* Compiler runs logged by the wrapper (its --version probes are not compiles). */
static int compiles_logged(void) { return count_lines(calls_log, " -o "); }

static void write_script(const char *path, const char *body) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(body, f);
    fclose(f);
    chmod(path, 0700);
}

/* Starts `self child mode arg` with CC (NULL: unset), OAR_JIT_CFLAGS (NULL:
 * unset) and stderr sent to errfile (NULL: inherited). Returns the pid. */
static pid_t start_child(const char *mode, const char *arg, const char *cc, const char *cflags,
                         const char *errfile) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (cc) setenv("CC", cc, 1);
        else unsetenv("CC");
        if (cflags) setenv("OAR_JIT_CFLAGS", cflags, 1);
        else unsetenv("OAR_JIT_CFLAGS");
        if (errfile) {
            int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) dup2(fd, 2);
        }
        execl(self_exe, "test_jit", "child", mode, arg ? arg : "", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; its exit status (128 + signal if killed). */
static int wait_child(pid_t pid) {
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_child(const char *mode, const char *arg, const char *cc, const char *cflags,
                     const char *errfile) {
    return wait_child(start_child(mode, arg, cc, cflags, errfile));
}

/* ---- child modes (a fresh process each) ------------------------------------------- */

/* Loads SRC_A and runs it; arg: the compile count expected ("1" or "0"). */
static void child_load(const char *arg) {
    oari_jit_stats st;
    oari_jit_lib *lib = load_checked(SRC_A, &st);
    CHECK(lib != NULL);
    check_exp_scale(lib);
    CHECK(oari_jit_compile_count() == atoi(arg));
    CHECK(st.compiled == (atoi(arg) == 1));
    oari_jit_release(lib);
}

/* Damages the cached library of SRC_A (arg "half": truncated to half its
 * size; "garbage": overwritten with text) and loads it again: rebuilt. */
static void child_damage(const char *arg) {
    oari_jit_stats st;
    oari_jit_lib *lib = load_checked(SRC_A, &st);
    CHECK(lib != NULL && !st.compiled);
    oari_jit_release(lib);
    /* Really unloaded: the next load reads the file again. */
    void *still = dlopen(st.path, RTLD_NOW | RTLD_NOLOAD);
    CHECK(still == NULL);
    if (still) dlclose(still);
    struct stat sb;
    CHECK(stat(st.path, &sb) == 0);
    if (!strcmp(arg, "half")) {
        CHECK(truncate(st.path, sb.st_size / 2) == 0);
    } else {
        FILE *f = fopen(st.path, "w");
        CHECK(f != NULL);
        if (f) {
            for (off_t i = 0; i < sb.st_size; i += 16) fputs("not a library...", f);
            fclose(f);
        }
    }
    oari_jit_stats st2;
    lib = load_checked(SRC_A, &st2);
    CHECK(lib != NULL);
    CHECK(st2.compiled && oari_jit_compile_count() == 1);
    CHECK(!strcmp(st.path, st2.path));
    check_exp_scale(lib);
    oari_jit_release(lib);
}

/* Loads SRC_RACE (started twice at once by the parent). */
static void child_race(const char *arg) {
    oari_jit_lib *lib = load_checked(SRC_RACE, NULL);
    CHECK(lib != NULL);
    int_fn f = (int_fn)oari_jit_symbol(lib, "k_race");
    CHECK(f && f() == 41);
    oari_jit_release(lib);
}

/* No usable compiler: unavailable, said once on stderr (the parent counts). */
static void child_nocc(const char *arg) {
    CHECK(!oari_jit_available());
    CHECK(!oari_jit_available());
    CHECK_FAILS(oari_jit_load(SRC_A, NULL), "no C compiler");
    CHECK_FAILS(oari_jit_load(SRC_A, NULL), "no C compiler");
    CHECK(oari_jit_compile_count() == 0);
    CHECK(strstr(oari_jit_flags(), "-O3") != NULL);
}

/* A refused flag (arg) in $OAR_JIT_CFLAGS or $CC. */
static void child_refused(const char *arg) {
    CHECK(!oari_jit_available());
    CHECK_FAILS(oari_jit_load(SRC_A, NULL), arg);
    CHECK_FAILS(oari_jit_load(SRC_A, NULL), "is refused");
    CHECK(oari_jit_compile_count() == 0);
    CHECK(strstr(oari_jit_flags(), arg) == NULL);
}

/* $CC adds -ffast-math behind oar's back: the library's constructor sets
 * flush-to-zero; the load guard must restore the register and refuse. */
static void child_ftz(const char *arg) {
    CHECK(oari_jit_available());
    unsigned before = fp_control();
    CHECK_FAILS(oari_jit_load(SRC_FTZ, NULL), "floating-point control");
    CHECK(fp_control() == before);
    CHECK(oari_jit_compile_count() == 1);
    /* A cache hit of the same library is refused the same way. */
    CHECK_FAILS(oari_jit_load(SRC_FTZ, NULL), "floating-point control");
    CHECK(fp_control() == before);
    CHECK(oari_jit_compile_count() == 1);
}

/* $OAR_JIT_CFLAGS reaches the compiler (arg: the expected value). */
static void child_cflags(const char *arg) {
    CHECK(strstr(oari_jit_flags(), "-DOAR_JIT_TEST_K=") != NULL);
    CHECK(strstr(oari_jit_flags(), "-fopenmp") != NULL);
    oari_jit_lib *lib = load_checked(SRC_MACRO, NULL);
    CHECK(lib != NULL);
    int_fn f = (int_fn)oari_jit_symbol(lib, "k_macro");
    CHECK(f && f() == atoi(arg));
    oari_jit_release(lib);
}

/* A cache folder that cannot be used: the load fails naming it (arg). */
static void child_badcache(const char *arg) {
    CHECK_FAILS(oari_jit_load(SRC_A, NULL), arg);
    CHECK(oari_jit_compile_count() == 0);
}

static int child_main(const char *mode, const char *arg) {
    static const struct {
        const char *name;
        void (*fn)(const char *);
    } modes[] = {{"load", child_load},       {"damage", child_damage}, {"race", child_race},
                 {"nocc", child_nocc},       {"refused", child_refused}, {"ftz", child_ftz},
                 {"cflags", child_cflags},   {"badcache", child_badcache}};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(mode, modes[i].name)) {
            test_current = mode;
            oar_clear_error();
            modes[i].fn(arg);
            return test_failed ? 1 : 0;
        }
    fprintf(stderr, "test_jit: unknown child mode %s\n", mode);
    return 2;
}

/* ---- the tests (parent process) --------------------------------------------------- */

static void test_null_args(void) {
    CHECK_FAILS(oari_jit_load(NULL, NULL), "NULL source");
    CHECK_FAILS(oari_jit_symbol(NULL, "f"), "NULL library");
    oari_jit_release(NULL); /* no-op */
}

static void test_compile_and_cache(void) {
    int before = oari_jit_compile_count();
    oari_jit_stats st;
    oari_jit_lib *lib = load_checked(SRC_A, &st);
    CHECK(lib != NULL);
    if (!lib) return;
    CHECK(st.compiled && oari_jit_compile_count() == before + 1);
    CHECK(st.ms > 0);
    CHECK(strstr(st.path, ".so") != NULL);
    check_exp_scale(lib);

    /* Missing symbol, NULL name. */
    CHECK_FAILS(oari_jit_symbol(lib, "no_such_kernel"), "no_such_kernel");
    CHECK_FAILS(oari_jit_symbol(lib, NULL), "NULL name");

    /* The same source again: from the cache, no compiler run. */
    oari_jit_stats st2;
    oari_jit_lib *again = load_checked(SRC_A, &st2);
    CHECK(again != NULL && !st2.compiled);
    CHECK(!strcmp(st.path, st2.path));
    CHECK(oari_jit_compile_count() == before + 1);
    if (again) check_exp_scale(again);
    oari_jit_release(again);

    /* The source is kept next to the library; new folders are 0700. */
    char c_path[600];
    snprintf(c_path, sizeof c_path, "%.*s.c", (int)(strlen(st.path) - 3), st.path);
    struct stat sb;
    CHECK(stat(c_path, &sb) == 0);
    char *slash = strrchr(st.path, '/');
    if (slash) {
        *slash = 0;
        CHECK(stat(st.path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    }
    oari_jit_release(lib);
}

static void test_flags(void) {
    const char *f = oari_jit_flags();
    CHECK(strstr(f, "-O3") && strstr(f, "-fPIC") && strstr(f, "-shared") && strstr(f, "-fopenmp"));
    CHECK(!strstr(f, "fast-math") && !strstr(f, "-Ofast") && !strstr(f, "unsafe-math"));
}

static void test_syntax_error(void) {
    int before = oari_jit_compile_count();
    CHECK_FAILS(oari_jit_load(SRC_BAD, NULL), "rejected the generated source");
    CHECK_FAILS(oari_jit_load(SRC_BAD, NULL), "expected expression");
    CHECK(oari_jit_compile_count() == before); /* failed runs are not counted as builds */
}

static long alloc_calls, fail_at;
static void *failing_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    if (++alloc_calls == fail_at) return NULL;
    return realloc(ptr, new_size);
}

/* Each allocation of a load (compiling, then from the cache) fails in turn:
 * out of memory is reported and nothing leaks (ASan builds check). */
static void test_alloc_failures(void) {
    static const char *src = KERNEL_HEAD "/* alloc */\nint k_alloc(void) { return 44; }\n";
    oari_jit_lib *lib = NULL;
    for (fail_at = 1; fail_at < 10 && !lib; fail_at++) {
        alloc_calls = 0;
        oar_clear_error();
        oar_set_allocator(failing_alloc, NULL);
        lib = oari_jit_load(src, NULL);
        oar_set_allocator(NULL, NULL);
        if (!lib) CHECK(strstr(oar_last_error(), "out of memory") != NULL);
    }
    CHECK(lib != NULL && fail_at > 2); /* at least the environment and the handle */
    int_fn f = lib ? (int_fn)oari_jit_symbol(lib, "k_alloc") : NULL;
    CHECK(f && f() == 44);
    oari_jit_release(lib);
}

static void *thread_load(void *arg) {
    oari_jit_lib **out = arg;
    *out = oari_jit_load(SRC_THREADS, NULL);
    return NULL;
}

/* Four threads load one new source at once: one compiler run. */
static void test_threads(void) {
    int before = oari_jit_compile_count();
    unsigned fp = fp_control();
    pthread_t th[4];
    oari_jit_lib *libs[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_load, &libs[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK(fp_control() == fp);
    CHECK(oari_jit_compile_count() == before + 1);
    for (int i = 0; i < 4; i++) {
        CHECK(libs[i] != NULL);
        int_fn f = libs[i] ? (int_fn)oari_jit_symbol(libs[i], "k_threads") : NULL;
        CHECK(f && f() == 42);
        oari_jit_release(libs[i]);
    }
}

/* Across processes, through the counting wrapper. */
static void test_processes(void) {
    CHECK(run_child("load", "1", wrap_cc, NULL, NULL) == 0);
    CHECK(compiles_logged() == 1);
    CHECK(run_child("load", "0", wrap_cc, NULL, NULL) == 0); /* second process: no compile */
    CHECK(compiles_logged() == 1);
    CHECK(count_lines(calls_log, "--version") == 2);       /* one probe per process */

    char err[PATH_MAX + 16];
    snprintf(err, sizeof err, "%s/damage.err", tmp_dir);
    CHECK(run_child("damage", "half", wrap_cc, NULL, err) == 0);
    CHECK(compiles_logged() == 2);
    CHECK(count_lines(err, "rebuilding") == 1); /* a warning names the file and why */
    CHECK(run_child("damage", "garbage", wrap_cc, NULL, err) == 0);
    CHECK(compiles_logged() == 3);
    CHECK(count_lines(err, "truncated or not an ELF library") == 1);

    /* Two processes load one new source at once: one compile. */
    pid_t a = start_child("race", NULL, wrap_cc, NULL, NULL);
    pid_t b = start_child("race", NULL, wrap_cc, NULL, NULL);
    CHECK(wait_child(a) == 0);
    CHECK(wait_child(b) == 0);
    CHECK(compiles_logged() == 4);

    CHECK(run_child("cflags", "7", wrap_cc, "-DOAR_JIT_TEST_K=7", NULL) == 0);
    CHECK(compiles_logged() == 5);
}

static void test_no_compiler(void) {
    static const char *ccs[] = {"/nonexistent/oar-test-cc", "false"};
    for (int i = 0; i < 2; i++) {
        char err[PATH_MAX + 16];
        snprintf(err, sizeof err, "%s/nocc%d.err", tmp_dir, i);
        CHECK(run_child("nocc", NULL, ccs[i], NULL, err) == 0);
        CHECK(count_lines(err, "oar: no C compiler") == 1); /* said once */
        CHECK(count_lines(err, "graphs run unfused") == 1);
    }
}

static void test_refused_flags(void) {
    static const char *flags[] = {"-ffast-math", "-Ofast", "-funsafe-math-optimizations"};
    char err[PATH_MAX + 16];
    snprintf(err, sizeof err, "%s/refused.err", tmp_dir);
    for (int i = 0; i < 3; i++) {
        char cflags[100];
        snprintf(cflags, sizeof cflags, "-O2 %s -g", flags[i]);
        CHECK(run_child("refused", flags[i], NULL, cflags, err) == 0);
        CHECK(count_lines(err, "is refused") == 1);
    }
    /* In $CC itself. */
    const char *cc = getenv("CC");
    char with[300];
    snprintf(with, sizeof with, "%s -ffast-math", cc && *cc ? cc : "cc");
    CHECK(run_child("refused", "-ffast-math", with, NULL, err) == 0);
    CHECK(count_lines(err, "is refused") == 1);
}

static void test_bad_cache(void) {
    char *saved = strdup(getenv("OAR_CACHE_DIR"));
    char path[700], err[PATH_MAX + 16];
    snprintf(err, sizeof err, "%s/badcache.err", tmp_dir);
    /* Under a regular file: mkdir fails. */
    snprintf(path, sizeof path, "%s/a-file", tmp_dir);
    write_script(path, "not a folder\n");
    snprintf(path, sizeof path, "%s/a-file/kernels", tmp_dir);
    setenv("OAR_CACHE_DIR", path, 1);
    CHECK(run_child("badcache", "cannot create the kernel cache", NULL, NULL, err) == 0);
    /* Too long a path. */
    memset(path, 'x', 600);
    path[0] = '/';
    path[600] = 0;
    setenv("OAR_CACHE_DIR", path, 1);
    CHECK(run_child("badcache", "no kernel cache folder", NULL, NULL, err) == 0);
    CHECK(count_lines(err, "graphs run unfused") == 1);
    setenv("OAR_CACHE_DIR", saved, 1);
    free(saved);
}

static void test_ftz_guard(void) {
#ifdef __x86_64__
    CHECK(run_child("ftz", NULL, ftz_cc, NULL, NULL) == 0);
#endif
}

/* After all the builds (failed ones too): only <32 hex>.so, .c and .lock
 * files in the cache, no temporaries left behind. */
static void test_cache_files(void) {
    DIR *d = opendir(getenv("OAR_CACHE_DIR"));
    CHECK(d != NULL);
    if (!d) return;
    int libs = 0, bad = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t hex = strspn(e->d_name, "0123456789abcdef");
        const char *ext = e->d_name + hex;
        bool ok = hex == 32 && (!strcmp(ext, ".so") || !strcmp(ext, ".c") || !strcmp(ext, ".lock"));
        if (!ok) fprintf(stderr, "unexpected file in the cache: %s\n", e->d_name);
        bad += !ok;
        libs += ok && !strcmp(ext, ".so");
    }
    closedir(d);
    CHECK(bad == 0);
    CHECK(libs >= 5);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "child")) return child_main(argv[2], argc > 3 ? argv[3] : "");

    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (n <= 0) {
        fprintf(stderr, "test_jit: cannot find /proc/self/exe\n");
        return 1;
    }
    self_exe[n] = 0;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/oar-test-jit-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    /* A fresh, not yet existing, nested cache folder for this run. */
    char cache[PATH_MAX + 16];
    snprintf(cache, sizeof cache, "%s/cache/kernels", tmp_dir);
    setenv("OAR_CACHE_DIR", cache, 1);
    unsetenv("OAR_JIT_CFLAGS");

    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    char script[PATH_MAX * 2 + 200];
    snprintf(calls_log, sizeof calls_log, "%s/calls.log", tmp_dir);
    snprintf(wrap_cc, sizeof wrap_cc, "%s/counting-cc", tmp_dir);
    snprintf(script, sizeof script, "#!/bin/sh\necho \"$*\" >> '%s'\nexec %s \"$@\"\n", calls_log, cc);
    write_script(wrap_cc, script);
    snprintf(ftz_cc, sizeof ftz_cc, "%s/fast-math-cc", tmp_dir);
    snprintf(script, sizeof script, "#!/bin/sh\nexec %s -ffast-math \"$@\"\n", cc);
    write_script(ftz_cc, script);

    RUN(test_null_args);
    RUN(test_no_compiler);
    RUN(test_refused_flags);
    bool have_cc = oari_jit_available();
    if (have_cc) {
        RUN(test_flags);
        RUN(test_compile_and_cache);
        RUN(test_syntax_error);
        RUN(test_threads);
        RUN(test_alloc_failures);
        RUN(test_processes);
        RUN(test_ftz_guard);
        RUN(test_bad_cache);
        RUN(test_cache_files);
    } else {
        printf("no C compiler (CC=%s): compile tests skipped\n", cc);
    }
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    int rc = test_summary();
    return rc ? rc : have_cc ? 0 : 77;
}

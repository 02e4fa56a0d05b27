/* Run-time compilation of generated C: the compiler probe, the cache key,
 * the on-disk cache (lock per key, atomic rename, damaged libraries
 * rebuilt), the compiler run and dlopen with a floating-point guard.
 * See jit.h for the contract.
 *
 * A load, in order: hash the source with the flags, the compiler's identity
 * and OARI_JIT_VERSION; if <cache>/<hex>.so is a complete ELF file that
 * loads, that is the answer (no lock taken). Otherwise take <hex>.lock
 * (flock, which serialises threads as well as processes: each caller opens
 * its own descriptor), look again (another process may have built it while
 * we waited), and only then write the source to a temporary file, run the
 * compiler into a temporary library and rename it into place. */
#define _GNU_SOURCE
#include "jit.h"

#include "../core/save.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __x86_64__
#include <cpuid.h>
#include <xmmintrin.h>
#endif

extern char **environ;

/* -fno-trapping-math (as the CPU kernels' #pragma): comparisons may become
 * selects and max/min, so row reductions and clamps vectorize fully (a
 * softmax over 1024-wide rows: 10% less time). Unlike -ffast-math it
 * changes no result and links no crtfastmath.o; oar never reads FP flags. */
#if defined(__x86_64__)
/* 256-bit vectors wherever the CPU has them: -march=native on a Zen 1 tunes
 * gcc to 128-bit ones (avx128_optimal), which also calls libmvec's SSE
 * forms; on that CPU the 8-op chain took 11.4 against 8.3-9.7 ms, the
 * softmax 6.8 against 5.6-6.1 (bench_fusion, 2026-12-07). Elsewhere it is
 * already gcc's choice, as it is the CPU kernels' (x86-64-v3 clones). */
#define VECTOR_FLAGS " -mprefer-vector-width=256"
#else
#define VECTOR_FLAGS ""
#endif
#define BASE_FLAGS "-O3 -march=native" VECTOR_FLAGS " -fPIC -shared -fopenmp -fno-math-errno -fno-trapping-math -std=gnu11"
#if defined(__x86_64__) && defined(__GLIBC__)
/* glibc's vector math (expf, logf, tanhf, ... for SSE/AVX2/AVX-512): the
 * generated code declares them __attribute__((simd)) so loops vectorise. */
#define LINK_FLAGS "-lmvec -lm"
#else
#define LINK_FLAGS "-lm"
#endif
#define MAX_ARGS 64
#define ERROR_LINES 20

/* ---- process state (set once by the probe, under `lock`) ----------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool probed, available;
static int unavailable_status;
static char unavailable_msg[640];
static char cc_buf[1024], extra_buf[1024];   /* $CC and $OAR_JIT_CFLAGS, split in place */
static char *cc_argv[MAX_ARGS], *extra_argv[MAX_ARGS];
static int cc_argc, extra_argc;
static char flags_str[1200];                 /* BASE_FLAGS + $OAR_JIT_CFLAGS */
static char identity[4096];                  /* compiler path, --version text, CPU */
static char cache_dir[PATH_MAX];
static int n_compiles;

struct oari_jit_lib {
    void *handle;
    size_t size; /* of this allocation */
    char path[];
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Splits s (copied into buf) on blanks into argv; the count, or -1 if it
 * does not fit. No quoting: a flag cannot contain a space. */
static int split_words(const char *s, char *buf, size_t cap, char **argv, int max) {
    if (strlen(s) >= cap) return -1;
    strcpy(buf, s);
    int n = 0;
    for (char *save = NULL, *w = strtok_r(buf, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        if (n == max - 1) return -1;
        argv[n++] = w;
    }
    argv[n] = NULL;
    return n;
}

/* The flag of argv that makes gcc link crtfastmath.o (which sets
 * flush-to-zero when the library loads), or NULL. */
static const char *fast_math_flag(char **argv, int n) {
    static const char *refused[] = {"-ffast-math", "-Ofast", "-funsafe-math-optimizations",
                                    "-mdaz-ftz"};
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < sizeof refused / sizeof *refused; j++)
            if (!strcmp(argv[i], refused[j])) return argv[i];
    return NULL;
}

/* Runs argv (PATH searched) with stdin from /dev/null, stdout + stderr
 * captured into out (the first cap - 1 bytes, NUL-terminated; the rest is
 * read and dropped) and the environment's locale forced to C (the same
 * `--version` text, hence the same key, and English messages whatever the
 * user's language). 0 with *wstatus set, or the errno of a failed start. */
static int run_capture(char *const argv[], char *out, size_t cap, int *wstatus) {
    size_t n_env = 0;
    while (environ && environ[n_env]) n_env++;
    size_t env_bytes = (n_env + 2) * sizeof(char *);
    char **env = oari_malloc(env_bytes);
    if (!env) return ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "LC_ALL=", 7) && strncmp(environ[i], "LANGUAGE=", 9))
            env[k++] = environ[i];
    env[k++] = "LC_ALL=C";
    env[k] = NULL;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        int e = errno;
        oari_free(env, env_bytes);
        return e;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    oari_free(env, env_bytes);
    close(fds[1]);
    if (err) {
        close(fds[0]);
        return err;
    }
    size_t len = 0;
    char drop[4096];
    for (;;) {
        bool room = len + 1 < cap;
        ssize_t r = room ? read(fds[0], out + len, cap - 1 - len) : read(fds[0], drop, sizeof drop);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (room) len += (size_t)r;
    }
    out[len] = 0;
    close(fds[0]);
    while (waitpid(pid, wstatus, 0) < 0)
        if (errno != EINTR) return errno;
    return 0;
}

/* The absolute path of the program argv0 would run (PATH searched), or
 * argv0 itself if it is not found. */
static void resolve_program(const char *argv0, char *out, size_t cap) {
    char cand[PATH_MAX], real[PATH_MAX];
    snprintf(out, cap, "%s", argv0);
    if (strchr(argv0, '/')) {
        if (realpath(argv0, real)) snprintf(out, cap, "%s", real);
        return;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    for (const char *p = path; *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (snprintf(cand, sizeof cand, "%.*s/%s", (int)n, n ? p : ".", argv0) < (int)sizeof cand &&
            access(cand, X_OK) == 0 && realpath(cand, real)) {
            snprintf(out, cap, "%s", real);
            return;
        }
        p += n + (e != NULL);
    }
}

/* The CPU the libraries are built for (-march=native): a cache folder
 * shared between machines must not hand one CPU another's code. */
static void cpu_identity(char *out, size_t cap) {
#ifdef __x86_64__
    unsigned max = 0, vendor[3] = {0}, sig = 0, b = 0, f1c = 0, f1d = 0, f7[3] = {0};
    if (__get_cpuid(0, &max, &vendor[0], &vendor[2], &vendor[1]) && max >= 1) {
        __get_cpuid(1, &sig, &b, &f1c, &f1d);
        if (max >= 7) __cpuid_count(7, 0, b, f7[0], f7[1], f7[2]);
    }
    snprintf(out, cap, "x86_64 %.12s sig %08x f1 %08x %08x f7 %08x %08x %08x", (const char *)vendor,
             sig, f1c, f1d, f7[0], f7[1], f7[2]);
#else
    /* Elsewhere: the kernel's description of the first CPU. */
    snprintf(out, cap, "other");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    char *blank = strstr(out, "\n\n");
    if (blank) *blank = 0;
    fclose(f);
#endif
}

static void set_unavailable(int status, const char *fmt, ...) OARI_PRINTF(2, 3);
static void set_unavailable(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(unavailable_msg, sizeof unavailable_msg, fmt, ap);
    va_end(ap);
    unavailable_status = status;
    available = false;
    fprintf(stderr, "oar: %s; graphs run unfused\n", unavailable_msg);
}

static int cache_dir_from_env(void) {
    const char *env = getenv("OAR_CACHE_DIR");
    int n;
    if (env && *env) n = snprintf(cache_dir, sizeof cache_dir, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        n = snprintf(cache_dir, sizeof cache_dir, "%s/oar/kernels", env);
    else if ((env = getenv("HOME")) && *env)
        n = snprintf(cache_dir, sizeof cache_dir, "%s/.cache/oar/kernels", env);
    else return -1;
    /* Room for "/<32 hex>.XXXXXX.lock" after it, within oari_jit_stats.path. */
    if (n >= (int)sizeof(((oari_jit_stats *)0)->path) - 64) return -1;
    while (n > 1 && cache_dir[n - 1] == '/') cache_dir[--n] = 0;
    return 0;
}

/* Reads the environment and runs `$CC --version`, once (under `lock`). */
static void probe_locked(void) {
    if (probed) return;
    probed = true;
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    const char *extra = getenv("OAR_JIT_CFLAGS");
    if (!extra) extra = "";
    cc_argc = split_words(cc, cc_buf, sizeof cc_buf, cc_argv, MAX_ARGS);
    extra_argc = split_words(extra, extra_buf, sizeof extra_buf, extra_argv, MAX_ARGS);
    if (cc_argc <= 0 || extra_argc < 0) {
        set_unavailable(OAR_ERR_INVALID, "%s is empty or too long (CC=\"%s\")",
                        cc_argc <= 0 ? "CC" : "OAR_JIT_CFLAGS", cc);
        return;
    }
    const char *where = "OAR_JIT_CFLAGS", *bad = fast_math_flag(extra_argv, extra_argc);
    if (!bad) {
        where = "CC";
        bad = fast_math_flag(cc_argv, cc_argc);
    }
    if (bad) {
        set_unavailable(OAR_ERR_INVALID,
                        "%s: %s is refused: gcc links a library built with it to set "
                        "flush-to-zero for the whole process when it loads (remove it)",
                        where, bad);
        return;
    }
    snprintf(flags_str, sizeof flags_str, "%s%s%s", BASE_FLAGS, extra_argc ? " " : "", extra);
    if (cache_dir_from_env()) {
        set_unavailable(OAR_ERR_IO, "no kernel cache folder (set OAR_CACHE_DIR: $HOME and "
                                    "$XDG_CACHE_HOME are unset, or the path passes 447 bytes)");
        return;
    }

    char *argv[MAX_ARGS + 1];
    int n = 0;
    for (int i = 0; i < cc_argc; i++) argv[n++] = cc_argv[i];
    argv[n++] = "--version";
    argv[n] = NULL;
    char version[2048];
    int wstatus = 0, err = run_capture(argv, version, sizeof version, &wstatus);
    if (err == ENOMEM) { /* not the compiler's fault: probe again next time */
        probed = false;
        unavailable_status = OAR_ERR_NOMEM;
        snprintf(unavailable_msg, sizeof unavailable_msg, "out of memory probing the compiler");
        return;
    }
    if (err) {
        set_unavailable(OAR_ERR_UNSUPPORTED, "no C compiler (CC=%s: %s)", cc, strerror(err));
        return;
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus)) {
        char *nl = strchr(version, '\n');
        if (nl) *nl = 0;
        set_unavailable(OAR_ERR_UNSUPPORTED, "no C compiler (`%s --version` failed: %s)", cc,
                        version[0] ? version : "no output");
        return;
    }
    char path[PATH_MAX], cpu[1024];
    resolve_program(cc_argv[0], path, sizeof path);
    cpu_identity(cpu, sizeof cpu);
    if (snprintf(identity, sizeof identity, "%s\n%s\n%s\n%s", cc, path, version, cpu) >=
        (int)sizeof identity) {
        set_unavailable(OAR_ERR_INVALID, "the compiler's identity is too long (CC=%s)", cc);
        return;
    }
    available = true;
}

bool oari_jit_available(void) {
    pthread_mutex_lock(&lock);
    probe_locked();
    bool ok = available;
    pthread_mutex_unlock(&lock);
    return ok;
}

const char *oari_jit_flags(void) {
    oari_jit_available();
    return flags_str[0] ? flags_str : BASE_FLAGS;
}

int oari_jit_compile_count(void) {
    pthread_mutex_lock(&lock);
    int n = n_compiles;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- the key ------------------------------------------------------------- */

/* Two independent 64-bit streams (FNV-1a over 8-byte words with a shift,
 * and a multiply-rotate hash with another constant), each finished with murmur3's fmix64: 128 bits, ample
 * for a cache that no adversary writes to. */
typedef struct hash128 {
    uint64_t a, b;
} hash128;

static void hash_bytes(hash128 *h, const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t a = h->a, b = h->b;
    /* eight bytes a step: the C prelude alone is tens of kilobytes, hashed on
     * every cache hit */
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        a = (a ^ w) * 0x100000001b3ull;
        a ^= a >> 29;
        b = ((b << 23 | b >> 41) ^ w) * 0x9e3779b97f4a7c15ull;
    }
    for (; n; s++, n--) {
        a = (a ^ *s) * 0x100000001b3ull;
        b = ((b << 23 | b >> 41) ^ *s) * 0x9e3779b97f4a7c15ull;
    }
    h->a = a;
    h->b = b;
}

/* A field: its length first, so ("ab", "c") and ("a", "bc") differ. */
static void hash_field(hash128 *h, const char *s) {
    uint64_t n = strlen(s);
    hash_bytes(h, &n, sizeof n);
    hash_bytes(h, s, n);
}

static uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static void key_hex(const char *src, char hex[33]) {
    hash128 h = {0xcbf29ce484222325ull, 0x243f6a8885a308d3ull};
    char version[32];
    snprintf(version, sizeof version, "oar-jit %d", OARI_JIT_VERSION);
    hash_field(&h, version);
    hash_field(&h, identity);
    hash_field(&h, flags_str);
    hash_field(&h, LINK_FLAGS);
    hash_field(&h, src);
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)fmix64(h.a),
             (unsigned long long)fmix64(h.b));
}

/* ---- loading ------------------------------------------------------------- */

/* True if path is an ELF file whose headers, segments and section table
 * all lie inside it: a truncated library fails this (the section table is
 * written last), where dlopen might map it and fault later. */
static bool elf_complete(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = false;
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) goto out;
    uint64_t size = (uint64_t)st.st_size;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 64 ||
        eh.e_phoff > size || (uint64_t)eh.e_phnum * eh.e_phentsize > size - eh.e_phoff ||
        eh.e_shoff > size || (uint64_t)eh.e_shnum * eh.e_shentsize > size - eh.e_shoff)
        goto out;
    Elf64_Phdr ph[64];
    size_t phbytes = (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
    if (pread(fd, ph, phbytes, (off_t)eh.e_phoff) != (ssize_t)phbytes) goto out;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_offset > size || ph[i].p_filesz > size - ph[i].p_offset) goto out;
    ok = true;
out:
    close(fd);
    return ok;
}

/* The floating-point control state a library's constructor could change
 * (exception flags left out). */
typedef struct fp_control {
    unsigned mxcsr;
    unsigned short x87;
    int round;
} fp_control;

static fp_control fp_control_now(void) {
    fp_control c = {0, 0, fegetround()};
#ifdef __x86_64__
    c.mxcsr = _mm_getcsr() & ~0x3fu;
    __asm__ volatile("fnstcw %0" : "=m"(c.x87));
#endif
    return c;
}

/* 0 and *handle: the library at path is loaded. 1: it is missing, damaged
 * or does not load (build it again; *why says why). Negative: loading it
 * changed the floating-point control state (restored, library closed). */
static int open_library(const char *path, void **handle, char *why, size_t cap) {
    *handle = NULL;
    if (access(path, F_OK)) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return 1;
    }
    if (!elf_complete(path)) {
        snprintf(why, cap, "%s: truncated or not an ELF library", path);
        return 1;
    }
    fenv_t env;
    fegetenv(&env);
    fp_control before = fp_control_now();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "%s", e ? e : "dlopen failed");
        return 1;
    }
    fp_control after = fp_control_now();
    if (before.mxcsr != after.mxcsr || before.x87 != after.x87 || before.round != after.round) {
        dlclose(h);
        fesetenv(&env);
        return oari_error(OAR_ERR_INVALID,
                          "oari_jit_load: loading %s changed the floating-point control state "
                          "(MXCSR %#x -> %#x, x87 %#x -> %#x): it was built with -ffast-math or "
                          "the like (CC=%s); refused",
                          path, before.mxcsr, after.mxcsr, before.x87, after.x87, cc_argv[0]);
    }
    *handle = h;
    return 0;
}

/* Keeps the first ERROR_LINES lines of s. */
static void first_lines(char *s) {
    int lines = 0;
    for (char *p = s; *p; p++)
        if (*p == '\n' && ++lines == ERROR_LINES) {
            p[1] = 0;
            break;
        }
}

/* Compiles src into so_path (renamed into place); 0 or an error status. */
static int compile(const char *src, const char *hex, const char *so_path) {
    /* cache_dir leaves room for these (cache_dir_from_env). */
    char c_tmp[PATH_MAX], so_tmp[PATH_MAX], c_keep[PATH_MAX];
    if (snprintf(c_tmp, sizeof c_tmp, "%s/%s.XXXXXX.c", cache_dir, hex) >= (int)sizeof c_tmp ||
        snprintf(so_tmp, sizeof so_tmp, "%s/%s.XXXXXX.so", cache_dir, hex) >= (int)sizeof so_tmp ||
        snprintf(c_keep, sizeof c_keep, "%s/%s.c", cache_dir, hex) >= (int)sizeof c_keep)
        return oari_error(OAR_ERR_IO, "oari_jit_load: cache path too long: %s", cache_dir);
    int fd = mkstemps(c_tmp, 2);
    if (fd < 0)
        return oari_error(OAR_ERR_IO, "oari_jit_load: cannot create a source file in %s: %s",
                          cache_dir, strerror(errno));
    size_t n = strlen(src), done = 0;
    while (done < n) {
        ssize_t w = write(fd, src + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(c_tmp);
            return oari_error(OAR_ERR_IO, "oari_jit_load: cannot write %s: %s", c_tmp, strerror(e));
        }
        done += (size_t)w;
    }
    close(fd);
    int so_fd = mkstemps(so_tmp, 3);
    if (so_fd < 0) {
        int e = errno;
        unlink(c_tmp);
        return oari_error(OAR_ERR_IO, "oari_jit_load: cannot create a library file in %s: %s",
                          cache_dir, strerror(e));
    }
    close(so_fd);

    char base_buf[sizeof BASE_FLAGS], link_buf[sizeof LINK_FLAGS];
    char *base_argv[16], *link_argv[8];
    int nb = split_words(BASE_FLAGS, base_buf, sizeof base_buf, base_argv, 16);
    int nl = split_words(LINK_FLAGS, link_buf, sizeof link_buf, link_argv, 8);
    char *argv[MAX_ARGS * 2 + 32];
    int na = 0;
    for (int i = 0; i < cc_argc; i++) argv[na++] = cc_argv[i];
    for (int i = 0; i < nb; i++) argv[na++] = base_argv[i];
    for (int i = 0; i < extra_argc; i++) argv[na++] = extra_argv[i];
    argv[na++] = "-o";
    argv[na++] = so_tmp;
    argv[na++] = c_tmp;
    for (int i = 0; i < nl; i++) argv[na++] = link_argv[i];
    argv[na] = NULL;

    char out[8192];
    int wstatus = 0, err = run_capture(argv, out, sizeof out, &wstatus);
    if (err || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus)) {
        unlink(so_tmp);
        unlink(c_tmp);
        if (err == ENOMEM) return oari_nomem("oari_jit_load: the compiler's environment");
        if (err)
            return oari_error(OAR_ERR_UNSUPPORTED, "oari_jit_load: cannot run the C compiler %s: %s",
                              cc_argv[0], strerror(err));
        first_lines(out);
        return oari_error(OAR_ERR_INVALID,
                          "oari_jit_load: the C compiler (%s) rejected the generated source "
                          "(%s %d):\n%s",
                          cc_argv[0], WIFEXITED(wstatus) ? "exit" : "signal",
                          WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus), out);
    }
    pthread_mutex_lock(&lock);
    n_compiles++;
    pthread_mutex_unlock(&lock);
    if (rename(so_tmp, so_path)) {
        int e = errno;
        unlink(so_tmp);
        unlink(c_tmp);
        return oari_error(OAR_ERR_IO, "oari_jit_load: cannot rename %s to %s: %s", so_tmp, so_path,
                          strerror(e));
    }
    /* The source stays next to its library, for reading (not needed to load). */
    if (rename(c_tmp, c_keep)) unlink(c_tmp);
    return 0;
}

oari_jit_lib *oari_jit_load(const char *src, oari_jit_stats *stats) {
    double t0 = now_ms();
    if (stats) memset(stats, 0, sizeof *stats);
    if (!src) {
        oari_error(OAR_ERR_INVALID, "oari_jit_load: NULL source");
        return NULL;
    }
    pthread_mutex_lock(&lock);
    probe_locked();
    bool ok = available;
    pthread_mutex_unlock(&lock);
    if (!ok) {
        oari_error(unavailable_status, "oari_jit_load: %s", unavailable_msg);
        return NULL;
    }

    char hex[33], so_path[PATH_MAX], lock_path[PATH_MAX], why[512];
    key_hex(src, hex);
    if (snprintf(so_path, sizeof so_path, "%s/%s.so", cache_dir, hex) >= (int)sizeof so_path ||
        snprintf(lock_path, sizeof lock_path, "%s/%s.lock", cache_dir, hex) >= (int)sizeof lock_path) {
        oari_error(OAR_ERR_IO, "oari_jit_load: cache path too long: %s", cache_dir);
        return NULL;
    }

    bool compiled = false;
    void *handle = NULL;
    int st = open_library(so_path, &handle, why, sizeof why);
    if (st < 0) return NULL;
    if (st > 0) {
        int err = oari_make_dirs(cache_dir, 0700);
        if (err) {
            oari_error(OAR_ERR_IO, "oari_jit_load: cannot create the kernel cache %s: %s",
                       cache_dir, strerror(err));
            return NULL;
        }
        int lfd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lfd < 0) {
            oari_error(OAR_ERR_IO, "oari_jit_load: cannot open %s: %s", lock_path, strerror(errno));
            return NULL;
        }
        while (flock(lfd, LOCK_EX))
            if (errno != EINTR) {
                oari_error(OAR_ERR_IO, "oari_jit_load: cannot lock %s: %s", lock_path,
                           strerror(errno));
                close(lfd);
                return NULL;
            }
        /* Built by another process or thread while we waited? */
        st = open_library(so_path, &handle, why, sizeof why);
        if (st > 0) {
            if (!access(so_path, F_OK)) oari_log(OAR_LOG_WARN, "jit", "rebuilding %s", why);
            unlink(so_path); /* missing or damaged */
            double t_cc = now_ms();
            st = compile(src, hex, so_path);
            if (!st) {
                compiled = true;
                oari_log(OAR_LOG_DEBUG, "jit", "compiled %s in %.1f ms", so_path, now_ms() - t_cc);
                st = open_library(so_path, &handle, why, sizeof why);
                if (st > 0)
                    st = oari_error(OAR_ERR_IO, "oari_jit_load: the library just built does not load: %s",
                                    why);
            }
        }
        flock(lfd, LOCK_UN);
        close(lfd);
        if (st) return NULL;
    }

    size_t len = strlen(so_path), size = sizeof(oari_jit_lib) + len + 1;
    oari_jit_lib *lib = oari_malloc(size);
    if (!lib) {
        dlclose(handle);
        return NULL;
    }
    lib->handle = handle;
    lib->size = size;
    memcpy(lib->path, so_path, len + 1);
    if (stats) {
        stats->compiled = compiled;
        if (snprintf(stats->path, sizeof stats->path, "%s", so_path) >= (int)sizeof stats->path)
            stats->path[0] = 0; /* not reached: cache_dir_from_env leaves room */
        stats->ms = now_ms() - t0;
    }
    return lib;
}

void *oari_jit_symbol(oari_jit_lib *lib, const char *name) {
    if (!lib || !name) {
        oari_error(OAR_ERR_INVALID, "oari_jit_symbol: NULL %s", lib ? "name" : "library");
        return NULL;
    }
    dlerror();
    void *p = dlsym(lib->handle, name);
    if (!p) {
        const char *e = dlerror();
        oari_error(OAR_ERR_INVALID, "oari_jit_symbol: no function %s in the kernel library (%s)",
                   name, e ? e : lib->path);
    }
    return p;
}

void oari_jit_release(oari_jit_lib *lib) {
    if (!lib) return;
    dlclose(lib->handle);
    oari_free(lib, lib->size);
}

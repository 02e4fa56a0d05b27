/* The one save protocol (src/io/file.h): a unique temporary in the
 * target's folder, written, fsync'd, renamed, the folder fsync'd; a failure
 * at any step leaves the target as it was and no temporary; a dead
 * writer's temporary goes with the next save; concurrent saves to one
 * path all succeed and leave one whole file. Every writer of oar goes
 * through it: safetensors (optimizer state, module checkpoints), .npy and
 * ONNX export (saved models: tests/graph/test_saved_model_crash.c). */
#include "graph/graph_test_util.h"

#include "io/file.h"
#include <dirent.h>
#include <errno.h>
#include <oar/infer.h>
#include <oar/io.h>
#include <oar/onnx.h>
#include <oar/optim.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_save_XXXXXX";

/* per thread: the concurrent-save test calls it from four threads */
static const char *tmp_path(const char *name) {
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(*n + 1, 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* Entries of dir whose name contains part. */
static int count(const char *part) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += e->d_name[0] != '.' && strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

/* The hook: records the steps; fails the one numbered fail_at with EIO. */
static int n_steps, fail_at = -1;
static oari_file_step steps[64];

static int hook(oari_file_step step, const char *path) {
    (void)path;
    if (n_steps < 64) steps[n_steps] = step;
    return n_steps++ == fail_at ? EIO : 0;
}

static void test_protocol(void) {
    const char *p = tmp_path("a.bin");
    n_steps = 0;
    fail_at = -1;
    oari_file_fault = hook;
    CHECK(oari_file_save(p, "hello", 5, "test_save") == 0);
    oari_file_fault = NULL;
    CHECK(n_steps == 5 && steps[0] == OARI_FILE_CREATE && steps[1] == OARI_FILE_WRITE && steps[2] == OARI_FILE_FSYNC &&
          steps[3] == OARI_FILE_RENAME && steps[4] == OARI_FILE_DIRSYNC);
    size_t n;
    char *b = slurp(p, &n);
    CHECK(b && n == 5 && !memcmp(b, "hello", 5));
    free(b);
    CHECK(count(".tmp.") == 0);
    /* a failure at each step: the old content stays, no temporary (the
     * folder's sync fails after the rename: the new content is there) */
    const char *what[5] = {"cannot create its temporary", "writing failed", "syncing failed", "renaming",
                           "syncing the folder failed"};
    for (int k = 0; k < 5; k++) {
        n_steps = 0;
        fail_at = k;
        oari_file_fault = hook;
        CHECK_STATUS_FAILS(oari_file_save(p, "world!", 6, "test_save"), what[k]);
        oari_file_fault = NULL;
        CHECK(strstr(oar_last_error(), "test_save: cannot write") && strstr(oar_last_error(), "Input/output error"));
        CHECK(oari_last_status() == OAR_ERR_IO);
        b = slurp(p, &n);
        CHECK(b && (k < 4 ? n == 5 && !memcmp(b, "hello", 5) : n == 6 && !memcmp(b, "world!", 6)));
        free(b);
        CHECK(count(".tmp.") == 0);
    }
    /* by parts: open, write, abort leaves nothing; using a failed file is an error */
    oari_wfile w;
    CHECK(oari_wfile_open(&w, tmp_path("b.bin"), "test_save") == 0);
    CHECK(count("b.bin.tmp.") == 1);
    CHECK(oari_wfile_write(&w, "abc", 3) == 0 && w.bytes == 3);
    oari_wfile_abort(&w);
    oari_wfile_abort(&w); /* safe twice */
    CHECK(count("b.bin") == 0);
    CHECK_STATUS_FAILS(oari_wfile_write(&w, "x", 1), "writing a file that is not open");
    CHECK_STATUS_FAILS(oari_wfile_commit(&w), "committing a file that is not open");
    CHECK_STATUS_FAILS(oari_wfile_open(&w, "", "test_save"), "the path is NULL or empty");
    CHECK_STATUS_FAILS(oari_file_save("/nonexistent/dir/x", "x", 1, "test_save"),
                       "test_save: cannot write /nonexistent/dir/x: cannot create its temporary: No such file");
    CHECK_STATUS_FAILS(oari_dir_sync("/nonexistent/dir", "test_save"), "syncing the folder failed");
    CHECK(oari_dir_sync(dir, "test_save") == 0);
    /* the crc32 and size of what was written */
    CHECK(oari_wfile_open(&w, tmp_path("c.bin"), "test_save") == 0);
    CHECK(oari_wfile_write(&w, "123456789", 9) == 0 && w.crc == 0xcbf43926u && w.bytes == 9);
    CHECK(oari_wfile_commit(&w) == 0);
}

static void test_names(void) {
    CHECK(oari_file_name_pid("x.tmp.1234.7", "") == 1234);
    CHECK(oari_file_name_pid("weights.42.99.safetensors", ".safetensors") == 42);
    CHECK(oari_file_name_pid("weights.42.safetensors", ".safetensors") == -1);
    CHECK(oari_file_name_pid("weights.x42.9.safetensors", ".safetensors") == -1);
    CHECK(oari_file_name_pid(".1.2", "") == -1);
    CHECK(oari_file_name_pid("a.1234567890123.2", "") == -1); /* not a pid */
    CHECK(oari_file_name_pid("a.tmp", "") == -1 && oari_file_name_pid("", ".x") == -1);
    CHECK(!oari_pid_dead(getpid()) && !oari_pid_dead(-1) && !oari_pid_dead(1));
}

/* A writer that dies mid-save leaves its temporary; the next save of that
 * file removes it, and not a live process's. */
static void test_dead_writer(void) {
    const char *p = tmp_path("d.bin");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        oari_wfile w;
        if (oari_wfile_open(&w, p, "child") || oari_wfile_write(&w, "partial", 7)) _exit(1);
        _exit(0); /* a crash: no commit, no abort */
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(oari_pid_dead(pid));
    CHECK(count("d.bin.tmp.") == 1);
    char live[600];
    snprintf(live, sizeof live, "%s.tmp.%ld.999999", p, (long)getpid());
    FILE *f = fopen(live, "w");
    fclose(f);
    CHECK(count("d.bin.tmp.") == 2);
    CHECK(oari_file_save(p, "whole", 5, "test_save") == 0);
    CHECK(count("d.bin.tmp.") == 1 && access(live, F_OK) == 0); /* ours (alive) stays */
    unlink(live);
    CHECK(oari_file_sweep("/nonexistent", "x") == 0);
}

/* Threads saving to one path at once: every save succeeds, the file is one
 * writer's whole content, no temporary is left. */
typedef struct writer {
    int id, failures;
} writer;

static void *write_loop(void *arg) {
    writer *w = arg;
    char buf[4096];
    memset(buf, 'a' + w->id, sizeof buf);
    for (int i = 0; i < 50; i++) w->failures += oari_file_save(tmp_path("same.bin"), buf, sizeof buf, "test_save") != 0;
    return NULL;
}

static void test_concurrent(void) {
    writer w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (writer){i, 0};
        CHECK(pthread_create(&t[i], NULL, write_loop, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(w[i].failures == 0);
    size_t n;
    char *b = slurp(tmp_path("same.bin"), &n);
    bool whole = b && n == 4096 && b[0] >= 'a' && b[0] <= 'd';
    for (size_t i = 1; whole && i < n; i++) whole = b[i] == b[0];
    CHECK(whole);
    free(b);
    CHECK(count(".tmp.") == 0);
}

/* Each writer of oar saves through the protocol: the hook sees its steps,
 * and a failed rename leaves the old file loading. */
static void check_writer(const char *name, int (*save)(const char *path), int (*loads)(const char *path)) {
    const char *p = tmp_path(name);
    CHECK(save(p) == 0 && loads(p));
    n_steps = 0;
    fail_at = -1;
    oari_file_fault = hook;
    CHECK(save(p) == 0);
    oari_file_fault = NULL;
    bool renamed = false;
    for (int i = 0; i < n_steps && i < 64; i++) renamed = renamed || steps[i] == OARI_FILE_RENAME;
    CHECK(n_steps >= 5 && steps[0] == OARI_FILE_CREATE && renamed && steps[n_steps - 1] == OARI_FILE_DIRSYNC);
    int total = n_steps;
    for (int k = 0; k < total - 1; k++) { /* (the last step, the folder's sync, follows the rename) */
        n_steps = 0;
        fail_at = k;
        oari_file_fault = hook;
        oar_clear_error();
        int st = save(p);
        oari_file_fault = NULL;
        CHECK(st == OAR_ERR_IO && strstr(oar_last_error(), p) && loads(p));
        if (st != OAR_ERR_IO) fprintf(stderr, "  %s: step %d: status %d (%s)\n", name, k, st, oar_last_error());
    }
    CHECK(count(".tmp.") == 0);
}

static oar_tensor *weights[2];
static oar_optimizer *adam;

static int save_st(const char *p) { return oar_safetensors_save(p, 2, (const char *[]){"a", "b"}, weights); }
static int loads_st(const char *p) {
    oar_tensor_dict *d = oar_safetensors_load(p);
    bool ok = d && oar_tensor_dict_size(d) == 2;
    oar_tensor_dict_free(d);
    return ok;
}
static int save_npy(const char *p) { return oar_npy_save(p, weights[0]); }
static int loads_npy(const char *p) {
    oar_tensor *t = oar_npy_load(p);
    bool ok = t && oar_tensor_numel(t) == 6;
    oar_tensor_release(t);
    return ok;
}
static int save_optim(const char *p) { return oar_optim_save(adam, p); }
static int loads_optim(const char *p) { return oar_optim_load(adam, p) == 0; }
static oar_graph *graph;
static int save_onnx(const char *p) { return oar_onnx_export(graph, p, NULL); }
static int loads_onnx(const char *p) {
    oar_graph *g = oar_onnx_load(p);
    oar_graph_free(g);
    return g != NULL;
}

static void test_writers(void) {
    oar_pool *pool = oar_pool_push();
    weights[0] = oar_randn(OAR_F32, 2, (int64_t[]){2, 3});
    weights[1] = oar_randn(OAR_F64, 1, (int64_t[]){4});
    check_writer("w.safetensors", save_st, loads_st);
    check_writer("w.npy", save_npy, loads_npy);
    oar_tensor_set_requires_grad(weights[0], true);
    adam = oar_adam_new(1, weights, NULL);
    CHECK(oar_backward(oar_sum(oar_mul(weights[0], weights[0]), 0, NULL, false), NULL) == 0 && oar_optim_step(adam) == 0);
    check_writer("o.safetensors", save_optim, loads_optim);
    oar_optim_free(adam);
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}};
    graph = oar_trace_module(m, &s);
#ifdef OAR_TEST_NO_ONNX /* built without ONNX: the writer exists and refuses */
    CHECK_STATUS_FAILS(save_onnx(tmp_path("m.onnx")), "built without ONNX");
    (void)loads_onnx;
#else
    check_writer("m.onnx", save_onnx, loads_onnx);
#endif
    oar_graph_free(graph);
    oar_module_free(m);
    oar_pool_pop(pool);
}

static void test_load_limit(void) {
    CHECK(oar_load_limit() == OAR_DEFAULT_LOAD_LIMIT);
    CHECK(oar_set_load_limit(1000) == OAR_DEFAULT_LOAD_LIMIT && oar_load_limit() == 1000);
    CHECK(oari_load_check("who", "f", "the thing", 1000, 1000) == 0);
    CHECK_STATUS_FAILS(oari_load_check("who", "f", "the thing", 1001, UINT64_MAX),
                       "who: f: the thing declares 1001 bytes, over the load limit of 1000");
    CHECK_STATUS_FAILS(oari_load_check("who", "f", "the thing", 10, 9),
                       "who: f: the thing declares 10 bytes, but the file holds 9 more");
    CHECK(oari_last_status() == OAR_ERR_IO);
    uint64_t nb = 7;
    CHECK(oari_load_shape("who", "f", "the shape", 2, (int64_t[]){10, 5}, 4, 200, &nb) == 0 && nb == 200);
    CHECK(oari_load_shape("who", "f", "the shape", 3, (int64_t[]){0, 1 << 20, 1 << 20}, 8, 0, &nb) == 0 && nb == 0);
    CHECK(oari_load_shape("who", "f", "the shape", 0, NULL, 2, 2, &nb) == 0 && nb == 2);
    CHECK_STATUS_FAILS(oari_load_shape("who", "f", "the shape", 2, (int64_t[]){10, 5}, 4, 199, &nb),
                       "who: f: the shape declares 200 bytes, but the file holds 199 more");
    CHECK_STATUS_FAILS(oari_load_shape("who", "f", "the shape", 2, (int64_t[]){30, 5}, 8, UINT64_MAX, &nb),
                       "declares 1200 bytes, over the load limit of 1000");
    CHECK_STATUS_FAILS(oari_load_shape("who", "f", "the shape", 2, (int64_t[]){3, -1}, 4, UINT64_MAX, &nb),
                       "who: f: the shape [3, -1] overflows");
    CHECK_STATUS_FAILS(oari_load_shape("who", "f", "the shape", 3, (int64_t[]){0, (int64_t)1 << 40, (int64_t)1 << 40},
                                       1, UINT64_MAX, &nb),
                       "the shape [0, 1099511627776, 1099511627776] overflows");
    CHECK(oar_set_load_limit(0) == 1000 && oar_load_limit() == OAR_DEFAULT_LOAD_LIMIT);
    FILE *f = fopen(tmp_path("r.bin"), "w+");
    fputs("0123456789", f);
    fseek(f, 3, SEEK_SET);
    CHECK(oari_file_remaining(f) == 7 && ftell(f) == 3);
    fclose(f);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_protocol);
    RUN(test_names);
    RUN(test_dead_writer);
    RUN(test_concurrent);
    RUN(test_writers);
    RUN(test_load_limit);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

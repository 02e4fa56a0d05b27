/* A saved model is committed as a whole (src/graph/serialize.c over the
 * save protocol of src/io/file.h):
 *  - a failure injected at every create, write, fsync, rename and folder
 *    sync of a save leaves the old model loading, with no temporary and no
 *    unnamed weights file left behind (the last step, the folder's sync
 *    after model.json's rename, may leave the new one);
 *  - a crash at every one of those steps (a child process that _exits
 *    there) leaves the old or the new model loading, and the next save
 *    removes what the dead writer left;
 *  - concurrent saves to one folder, from threads and from processes, all
 *    succeed and the folder loads as one of the models, with one weights
 *    file. */
#include "graph_test_util.h"
#include "saved_model_util.h"

#include "io/file.h"
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_commit_XXXXXX";
static oar_graph *model_a, *model_b;
static oar_tensor *x, *ya, *yb;

/* The fault hook: counts steps; at step fail_at fails it with EIO, or
 * (crash) ends the process there, as a power cut would. */
static int step_no, fail_at = -1;
static bool crash;
static oari_file_step failed_step;

static int hook(oari_file_step step, const char *path) {
    (void)path;
    if (step_no++ != fail_at) return 0;
    failed_step = step;
    if (crash) _exit(3);
    return EIO;
}

/* Runs g on x; the output (new reference) or NULL. */
static oar_tensor *run(oar_graph *g) {
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *y = NULL;
    int st = oar_executor_run(ex, &x, &y);
    oar_tensor *r = st ? NULL : oar_contiguous(y);
    if (r) oar_tensor_retain(r);
    oar_executor_free(ex);
    return r;
}

/* 'a' or 'b': which model the folder loads as; 0 if it does not load. */
static char which(const char *d) {
    oar_graph *g = oar_graph_load(d);
    if (!g) return 0;
    oar_pool *p = oar_pool_push();
    oar_tensor *y = run(g);
    char w = !y ? 0 : max_diff(y, ya) == 0 ? 'a' : max_diff(y, yb) == 0 ? 'b' : '?';
    oar_tensor_release(y);
    oar_pool_pop(p);
    oar_graph_free(g);
    return w;
}

static void reset_to_a(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    CHECK(oar_graph_save(model_a, dir) == 0);
    CHECK(which(dir) == 'a');
}

/* A failure at each step in turn: the save fails naming the step's file,
 * the old model loads, nothing is left behind. */
static void test_failure_at_every_step(void) {
    int steps = 0;
    for (int k = 0;; k++) {
        reset_to_a();
        step_no = 0;
        fail_at = k;
        crash = false;
        oari_file_fault = hook;
        oar_clear_error();
        int st = oar_graph_save(model_b, dir);
        oari_file_fault = NULL;
        if (step_no <= k) { /* no step left to fail: the save went through */
            CHECK(st == 0 && which(dir) == 'b');
            steps = k;
            break;
        }
        CHECK(st == OAR_ERR_IO && strstr(oar_last_error(), "Input/output error") &&
              (strstr(oar_last_error(), "graph_save") || strstr(oar_last_error(), "safetensors_save")));
        char w = which(dir);
        bool last = failed_step == OARI_FILE_DIRSYNC && strstr(oar_last_error(), "graph_save");
        CHECK(w == 'a' || (last && w == 'b'));
        if (!(w == 'a' || (last && w == 'b')))
            fprintf(stderr, "  step %d (kind %d): loads as %c (%s)\n", k, (int)failed_step, w ? w : '-',
                    oar_last_error());
        CHECK(sm_count(dir, ".tmp.") == 0 && sm_count(dir, "") == 2);
    }
    /* weights: create, 3 header writes, one per tensor, fsync, rename,
     * folder sync; model.json: create, write, fsync, rename, folder sync */
    CHECK(steps >= 12);
}

/* A crash at each step in turn (a child process ends there): the old or
 * the new model loads; the next save cleans up after the dead writer. */
static void test_crash_at_every_step(void) {
    int crashes = 0;
    for (int k = 0;; k++) {
        reset_to_a();
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            step_no = 0;
            fail_at = k;
            crash = true;
            oari_file_fault = hook;
            _exit(oar_graph_save(model_b, dir) == 0 ? 0 : 1);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
        int code = WEXITSTATUS(status);
        CHECK(code == 0 || code == 3);
        char w = which(dir);
        if (code == 0) { /* past the last step */
            CHECK(w == 'b');
            break;
        }
        crashes++;
        CHECK(w == 'a' || w == 'b');
        /* the dead writer's temporary and unnamed weights go with the next save */
        CHECK(oar_graph_save(model_b, dir) == 0 && which(dir) == 'b');
        CHECK(sm_count(dir, ".tmp.") == 0 && sm_count(dir, "") == 2);
    }
    CHECK(crashes >= 12);
}

/* Threads saving two models to one folder at once. */
typedef struct saver {
    oar_graph *g;
    int rounds, failures;
} saver;

static void *save_loop(void *arg) {
    saver *s = arg;
    for (int i = 0; i < s->rounds; i++) s->failures += oar_graph_save(s->g, dir) != 0;
    return NULL;
}

static void test_concurrent_saves(void) {
    reset_to_a();
    saver s[2] = {{model_a, 20, 0}, {model_b, 20, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, save_loop, &s[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(s[0].failures == 0 && s[1].failures == 0);
    char w = which(dir);
    CHECK(w == 'a' || w == 'b');
    CHECK(sm_count(dir, ".tmp.") == 0 && sm_count(dir, "") == 2);
    /* two processes */
    fflush(NULL);
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        if ((pid[i] = fork()) == 0) {
            saver c = {i ? model_b : model_a, 10, 0};
            save_loop(&c);
            _exit(c.failures ? 1 : 0);
        }
    }
    for (int i = 0; i < 2; i++) {
        int status = 0;
        CHECK(pid[i] > 0 && waitpid(pid[i], &status, 0) == pid[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    w = which(dir);
    CHECK(w == 'a' || w == 'b');
    CHECK(sm_count(dir, ".tmp.") == 0);
    CHECK(oar_graph_save(model_a, dir) == 0 && which(dir) == 'a' && sm_count(dir, "") == 2);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    oar_pool *p = oar_pool_push();
    oar_module *ma = make_mlp();
    oar_manual_seed(7);
    oar_module *mb = oar_sequential_new(3, (oar_module *[]){oar_linear_new(8, 5, true), oar_tanh_new(),
                                                            oar_linear_new(5, 4, false)});
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}};
    model_a = oar_trace_module(ma, &s);
    model_b = oar_trace_module(mb, &s);
    x = oar_randn(OAR_F32, 2, (int64_t[]){3, 8});
    ya = run(model_a);
    yb = run(model_b);
    CHECK(ya && yb && max_diff(ya, yb) > 0);
    RUN(test_failure_at_every_step);
    RUN(test_crash_at_every_step);
    RUN(test_concurrent_saves);
    oar_tensor_release(ya);
    oar_tensor_release(yb);
    oar_graph_free(model_a);
    oar_graph_free(model_b);
    oar_module_free(ma);
    oar_module_free(mb);
    oar_pool_pop(p);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

/* The oar command line (tools/oar.c, built next to this test): info,
 * graph, run (through .npy files, checked against eager) and bench. */
#include "graph/graph_test_util.h"
#include "graph/saved_model_util.h"

#include <libgen.h>
#include <oar/infer.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_cli_XXXXXX", exe[4096];

/* Runs `oar ARGS` and returns its stdout+stderr (malloc'd); *rc its status. */
static char *oar_cmd(const char *args, int *rc) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", exe, args);
    FILE *f = popen(cmd, "r");
    char *out = calloc(1 << 16, 1);
    size_t n = f ? fread(out, 1, (1 << 16) - 1, f) : 0;
    out[n] = 0;
    *rc = f ? pclose(f) : -1;
    return out;
}

static void test_cli(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    CHECK(oar_graph_save(g, dir) == 0);
    oar_graph_free(g);
    int rc;
    char args[16384], *out;
    snprintf(args, sizeof args, "info %s", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "input  0: x float32 [?, 8]") && strstr(out, "output 0: y float32 [?, 4]"));
    CHECK(strstr(out, "arena at batch 1: ") != NULL);
    free(out);
    out = oar_cmd("devices", &rc);
    CHECK(rc == 0 && strstr(out, "device cpu") != NULL);
    free(out);
    snprintf(args, sizeof args, "graph %s --optimize", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "matmul(") && strstr(out, "float32[N, 16]"));
    free(out);

    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){5, 8});
    char xp[4200], yp[4200];
    snprintf(xp, sizeof xp, "%s/x.npy", dir);
    snprintf(yp, sizeof yp, "%s/y.npy", dir);
    CHECK(oar_npy_save(xp, x) == 0);
    snprintf(args, sizeof args, "run %s --input %s --output %s", dir, xp, yp);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "y: float32 [5, 4]"));
    free(out);
    oar_tensor *y = oar_npy_load(yp);
    CHECK_NEAR(max_diff(y, oar_module_forward(m, x)), 0, 1e-5);
    oar_tensor_release(y);

    snprintf(args, sizeof args, "bench %s --batch 4 --iters 20 --warmup 2 --threads 1", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "latency ms: mean") && strstr(out, "p99") && strstr(out, "samples/s"));
    CHECK(strstr(out, "compiled") != NULL); /* the bias add and ReLU: one kernel */
    free(out);
    snprintf(args, sizeof args, "bench %s --batch 4 --iters 5 --warmup 1 --no-compile", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "unfused") && strstr(out, "samples/s"));
    free(out);
    /* no C compiler: the graph runs unfused, and that is said */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "CC=/nonexistent/cc OAR_CACHE_DIR=%s/cache %s bench %s --batch 2 --iters 3 --warmup 1 2>&1",
             dir, exe, dir);
    FILE *pf = popen(cmd, "r");
    char buf[4096] = {0};
    size_t got = pf ? fread(buf, 1, sizeof buf - 1, pf) : 0;
    buf[got] = 0;
    CHECK(pf && pclose(pf) == 0 && strstr(buf, "unfused") && strstr(buf, "no C compiler"));
    /* a kernel cache that cannot be made: a warning, and the model runs unfused */
    snprintf(cmd, sizeof cmd, "OAR_CACHE_DIR=/proc/oar-no-such-dir %s bench %s --batch 2 --iters 3 --warmup 1 2>&1",
             exe, dir);
    pf = popen(cmd, "r");
    got = pf ? fread(buf, 1, sizeof buf - 1, pf) : 0;
    buf[got] = 0;
    CHECK(pf && pclose(pf) == 0 && strstr(buf, "unfused") && strstr(buf, "kernel cache"));
    snprintf(args, sizeof args, "graph %s --kernels", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "void oar_k0(") && strstr(out, "kernel launches per run"));
    free(out);
    snprintf(args, sizeof args, "run %s --input %s --output %s --no-compile", dir, xp, yp);
    out = oar_cmd(args, &rc);
    CHECK(rc == 0 && strstr(out, "y: float32 [5, 4]"));
    free(out);

    oar_pool_pop(p);
    out = oar_cmd("info /nonexistent/model", &rc);
    CHECK(rc != 0 && strstr(out, "cannot open"));
    free(out);
    snprintf(args, sizeof args, "run %s --input /nonexistent.npy", dir);
    out = oar_cmd(args, &rc);
    CHECK(rc != 0 && strstr(out, "/nonexistent.npy"));
    free(out);
    out = oar_cmd("frobnicate x", &rc);
    CHECK(rc != 0 && strstr(out, "usage"));
    free(out);
    oar_module_free(m);
}

/* Issue 27: forged models (a constant's kind "input", a symbol's trace
 * size 0) made oar info and oar run (compiled and not) die of SIGSEGV and
 * SIGFPE; now each exits 1 with the loader's message. */
static void test_forged(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    char sub[4200], jp[4300], xp[4300], yp[4300];
    snprintf(sub, sizeof sub, "%s/forged", dir);
    CHECK(oar_graph_save(g, sub) == 0);
    oar_graph_free(g);
    snprintf(jp, sizeof jp, "%s/model.json", sub);
    snprintf(xp, sizeof xp, "%s/fx.npy", dir);
    snprintf(yp, sizeof yp, "%s/fy.npy", dir);
    oar_pool *p = oar_pool_push();
    CHECK(oar_npy_save(xp, oar_randn(OAR_F32, 2, (int64_t[]){2, 8})) == 0);
    oar_pool_pop(p);
    size_t n;
    char *text = sm_slurp(jp, &n);
    struct {
        const char *from, *to, *needle;
    } forged[] = {
        {"\"kind\":\t\"const\"", "\"kind\":\t\"input\"", "is an input value, but not one of the graph's"},
        {"\"trace_size\":\t1031", "\"trace_size\":\t0", "has trace_size 0"},
        {"\"trace_size\":\t1031", "\"trace_size\":\t1e300", "has trace_size 1e+300"},
    };
    const char *cmds[3] = {"info %s", "run %s --input %s --output %s", "run %s --input %s --output %s --no-compile"};
    for (size_t k = 0; k < sizeof forged / sizeof *forged; k++) {
        char *at = text ? strstr(text, forged[k].from) : NULL;
        CHECK(at != NULL);
        if (!at) continue;
        FILE *f = fopen(jp, "wb");
        fprintf(f, "%.*s%s%s", (int)(at - text), text, forged[k].to, at + strlen(forged[k].from));
        fclose(f);
        for (int c = 0; c < 3; c++) {
            char sub_args[9000];
            snprintf(sub_args, sizeof sub_args, cmds[c], sub, xp, yp);
            int rc;
            char *out = oar_cmd(sub_args, &rc);
            CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && strstr(out, forged[k].needle) && strstr(out, "model.json"));
            if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 1))
                fprintf(stderr, "  oar %s: %s %d\n%s", sub_args, WIFSIGNALED(rc) ? "signal" : "status",
                        WIFSIGNALED(rc) ? WTERMSIG(rc) : WEXITSTATUS(rc), out);
            free(out);
        }
    }
    free(text);
    oar_module_free(m);
}

int main(void) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 8);
    if (n <= 0 || !mkdtemp(dir)) return 1;
    exe[n] = 0;
    char *d = dirname(exe);
    memmove(exe, d, strlen(d) + 1);
    strcat(exe, "/oar");
    if (access(exe, X_OK)) {
        fprintf(stderr, "test_cli: %s is not built\n", exe);
        return 1;
    }
    RUN(test_cli);
    RUN(test_forged);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

/* The oar command line (tools/, built next to this test): info on every
 * file kind, graph, run (through .npy files, checked against eager), bench,
 * plot, the help and version, and the form and exit status of every kind
 * of error (docs/cli.md: 0 ok, 1 failure, 2 usage error). */
#include "graph/graph_test_util.h"
#include "graph/saved_model_util.h"

#include <ctype.h>
#include <libgen.h>
#include <oar/infer.h>
#include <oar/onnx.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_cli_XXXXXX", exe[4096];

/* Runs `oar ARGS REDIR` and returns what it printed (malloc'd); *rc its
 * wait status. REDIR: "2>&1" (both streams), "2>/dev/null" (stdout only)
 * or "2>&1 >/dev/null" (stderr only). */
static char *oar_run(const char *args, const char *redir, int *rc) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s %s", exe, args, redir);
    FILE *f = popen(cmd, "r");
    char *out = calloc(1 << 18, 1);
    size_t n = f ? fread(out, 1, (1 << 18) - 1, f) : 0;
    out[n] = 0;
    *rc = f ? pclose(f) : -1;
    return out;
}

/* Runs `oar ARGS` and returns its stdout+stderr (malloc'd); *rc its status. */
static char *oar_cmd(const char *args, int *rc) { return oar_run(args, "2>&1", rc); }

/* The exit status of a wait status (-1: killed). */
static int exit_status(int rc) { return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1; }

/* `oar ARGS` exits `status` and prints, on stdout and stderr together,
 * text that contains every non-NULL needle. */
static void expect(const char *args, int status, const char *n1, const char *n2, const char *n3) {
    int rc;
    char *out = oar_cmd(args, &rc);
    bool ok = exit_status(rc) == status && (!n1 || strstr(out, n1)) && (!n2 || strstr(out, n2)) &&
              (!n3 || strstr(out, n3));
    CHECK(ok);
    if (!ok) fprintf(stderr, "  oar %s: exit %d, wanted %d and \"%s\" \"%s\" \"%s\"; printed:\n%s\n", args,
                     exit_status(rc), status, n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "", out);
    free(out);
}

/* `oar ARGS` is a usage error of cmd (NULL: of the command name): exit
 * status 2 and exactly two lines, "oar CMD: ARG: REASON" (starting with
 * want, and holding `also` if non-NULL) and "see 'oar CMD --help'"; no
 * usage reprinted. */
static void expect_usage(const char *args, const char *cmd, const char *want, const char *also) {
    int rc;
    char *out = oar_cmd(args, &rc), first[600], hint[200];
    snprintf(first, sizeof first, "oar%s%s: %s", cmd ? " " : "", cmd ? cmd : "", want);
    snprintf(hint, sizeof hint, "\nsee 'oar%s%s --help'\n", cmd ? " " : "", cmd ? cmd : "");
    char *nl = strchr(out, '\n');
    bool ok = exit_status(rc) == 2 && !strncmp(out, first, strlen(first)) && nl && !strcmp(nl, hint) &&
              (!also || strstr(out, also)) && !strstr(out, "usage");
    CHECK(ok);
    if (!ok) fprintf(stderr, "  oar %s: exit %d; wanted 2 and \"%s...\"%s; printed:\n%s\n", args, exit_status(rc),
                     first, hint, out);
    free(out);
}

static void spit_text(const char *path, const char *text) { sm_spit(path, text, strlen(text)); }

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Tags balance and nest, attribute values are quoted, and every '&' starts
 * an entity: well-formed XML (enough for what plot writes). */
static bool xml_well_formed(const char *s) {
    const char *name[64];
    size_t len[64];
    int depth = 0, roots = 0;
    for (const char *p = s; *p;) {
        if (*p == '&') {
            static const char *ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            bool known = false;
            for (int k = 0; k < 5; k++) known |= !strncmp(p, ent[k], strlen(ent[k]));
            if (!known) return false;
            p++;
            continue;
        }
        if (*p != '<') {
            if (*p == '>' || (!depth && !isspace((unsigned char)*p))) return false;
            p++;
            continue;
        }
        if (!strncmp(p, "<?", 2)) {
            if (!(p = strstr(p, "?>"))) return false;
            p += 2;
            continue;
        }
        bool close = p[1] == '/';
        const char *n = p + 1 + close, *q = n + strcspn(n, " \t\n/>");
        size_t nl = (size_t)(q - n);
        char quote = 0;
        if (!nl) return false;
        for (; *q && (quote || *q != '>'); q++) {
            if (quote && *q == quote) quote = 0;
            else if (quote && *q == '<') return false;
            else if (!quote && (*q == '"' || *q == '\'')) quote = *q;
            else if (!quote && *q == '=' && q[1] != '"' && q[1] != '\'') return false;
        }
        if (!*q) return false;
        if (close) {
            if (!depth || len[depth - 1] != nl || strncmp(name[depth - 1], n, nl)) return false;
            depth--;
        } else if (q[-1] != '/') {
            if (depth == 64 || (!depth && roots++)) return false;
            name[depth] = n;
            len[depth++] = nl;
        }
        p = q + 1;
    }
    return depth == 0 && roots == 1;
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
    CHECK(strstr(out, "arena at batch 1: ") != NULL && strstr(out, "(saved-model folder)") != NULL);
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
    /* a list: each size timed on one predictor packed for both */
    snprintf(args, sizeof args, "bench %s --batch 2,4 --iters 3 --warmup 1 --threads 1", dir);
    out = oar_cmd(args, &rc);
    const char *b2 = out ? strstr(out, "batch 2 ") : NULL, *b4 = b2 ? strstr(b2, "batch 4 ") : NULL;
    CHECK(rc == 0 && b2 && b4 && strstr(b2, "samples/s") < b4 && strstr(b4, "samples/s"));
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
    /* runtime failures: exit 1, "oar CMD: " and the library's message */
    expect("info /nonexistent/model", 1, "oar info: /nonexistent/model: cannot open: No such file", NULL, NULL);
    snprintf(args, sizeof args, "run %s --input /nonexistent.npy", dir);
    expect(args, 1, "oar run: ", "/nonexistent.npy", "cannot open");
    expect("graph /nonexistent/model", 1, "oar graph: /nonexistent/model: cannot open", NULL, NULL);
    oar_module_free(m);
}

/* oar quantize: the saved MLP (two Linear layers) to int8, served by
 * `oar run` within quantization error of the f32 model; then its usage
 * errors and failures. */
static void test_quantize(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    char model[64], q[64], cp[64], xp[64], yp[64], args[1024];
    snprintf(model, sizeof model, "%s/qsrc", dir);
    snprintf(q, sizeof q, "%s/qout", dir);
    snprintf(cp, sizeof cp, "%s/calib.npy", dir);
    snprintf(xp, sizeof xp, "%s/qx.npy", dir);
    snprintf(yp, sizeof yp, "%s/qy.npy", dir);
    CHECK(oar_graph_save(g, model) == 0);
    oar_graph_free(g);
    oar_manual_seed(3);
    oar_tensor *calib = oar_randn(OAR_F32, 2, (int64_t[]){64, 8}), *x = oar_randn(OAR_F32, 2, (int64_t[]){5, 8});
    CHECK(oar_npy_save(cp, calib) == 0 && oar_npy_save(xp, x) == 0);
    snprintf(args, sizeof args, "quantize %s %s --calib %s --calib %s --method entropy", model, q, cp, cp);
    expect(args, 0, "layers quantized to int8 (entropy, per-channel weights), calibrated on 2 batches", NULL, NULL);
    oar_graph *gq = oar_graph_load(q);
    CHECK(gq && oar_graph_count_op(gq, "qmatmul") > 0 && oar_graph_count_op(gq, "matmul") == 0);
    oar_graph_free(gq);
    snprintf(args, sizeof args, "run %s --input %s --output %s", q, xp, yp);
    expect(args, 0, "y: float32 [5, 4]", NULL, NULL);
    oar_tensor *y = oar_npy_load(yp), *want = oar_module_forward(m, x);
    double mag = oar_tensor_item(oar_amax(oar_abs(want), 0, NULL, false));
    CHECK(y && max_diff(y, want) > 0 && max_diff(y, want) < 0.05 * mag); /* int8, and close */
    oar_tensor_release(y);
    /* usage errors, then failures */
    snprintf(args, sizeof args, "quantize %s", model);
    expect_usage(args, "quantize", "OUT: missing", NULL);
    snprintf(args, sizeof args, "quantize %s %s", model, q);
    expect_usage(args, "quantize", "--calib: missing", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib x.txt", model, q);
    expect_usage(args, "quantize", "--calib: expected .npy files", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib %s,", model, q, cp);
    expect_usage(args, "quantize", "--calib: expected .npy files", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib %s,%s", model, q, cp, cp);
    expect_usage(args, "quantize", "--calib: batch 0 names 2 files; the model takes 1 input", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib %s --method kl", model, q, cp);
    expect_usage(args, "quantize", "--method: expected minmax, percentile or entropy, got 'kl'", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib %s extra", model, q, cp);
    expect_usage(args, "quantize", "extra: unexpected argument", NULL);
    snprintf(args, sizeof args, "quantize %s %s --calib /nonexistent.npy", model, q);
    expect(args, 1, "oar quantize: ", "/nonexistent.npy", NULL);
    oar_tensor *wrong = oar_randn(OAR_F32, 2, (int64_t[]){4, 9});
    CHECK(oar_npy_save(cp, wrong) == 0);
    snprintf(args, sizeof args, "quantize %s %s --calib %s", model, q, cp);
    expect(args, 1, "oar quantize: graph_quantize: calibration batch 0", NULL, NULL);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* y = x W1 + z W2: a model of two inputs */
typedef struct { oar_tensor *w1, *w2; } two_in;
static int two_in_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    two_in *t = ctx;
    out[0] = oar_add(oar_matmul(in[0], t->w1), oar_matmul(in[1], t->w2));
    return out[0] ? 0 : -1;
}

/* oar quantize on a model of two inputs: each --calib batch names one
 * .npy per input; a batch naming too few is a usage error. */
static void test_quantize_two_inputs(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    two_in t = {oar_randn(OAR_F32, 2, (int64_t[]){8, 4}), oar_randn(OAR_F32, 2, (int64_t[]){6, 4})};
    oar_graph_input_spec s[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {16, 8}},
                                 {.name = "z", .dtype = OAR_F32, .ndim = 2, .shape = {16, 6}}};
    oar_graph *g = oar_trace(two_in_fn, &t, 2, s, 1, NULL);
    char model[64], q[64], xp[64], zp[64], yp[64], args[1024];
    snprintf(model, sizeof model, "%s/q2src", dir);
    snprintf(q, sizeof q, "%s/q2out", dir);
    snprintf(xp, sizeof xp, "%s/q2x.npy", dir);
    snprintf(zp, sizeof zp, "%s/q2z.npy", dir);
    snprintf(yp, sizeof yp, "%s/q2y.npy", dir);
    CHECK(g && oar_graph_save(g, model) == 0);
    oar_graph_free(g);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){16, 8}), *z = oar_randn(OAR_F32, 2, (int64_t[]){16, 6});
    CHECK(oar_npy_save(xp, x) == 0 && oar_npy_save(zp, z) == 0);
    snprintf(args, sizeof args, "quantize %s %s --calib %s,%s --calib %s,%s", model, q, xp, zp, xp, zp);
    expect(args, 0, "2 layers quantized to int8 (min-max, per-channel weights), calibrated on 2 batches", NULL, NULL);
    oar_graph *gq = oar_graph_load(q);
    CHECK(gq && oar_graph_count_op(gq, "qmatmul") == 2 && oar_graph_count_op(gq, "matmul") == 0);
    oar_graph_free(gq);
    snprintf(args, sizeof args, "run %s --input %s --input %s --output %s", q, xp, zp, yp);
    expect(args, 0, "float32 [16, 4]", NULL, NULL);
    oar_tensor *y = oar_npy_load(yp), *want = oar_add(oar_matmul(x, t.w1), oar_matmul(z, t.w2));
    double mag = oar_tensor_item(oar_amax(oar_abs(want), 0, NULL, false));
    CHECK(y && max_diff(y, want) > 0 && max_diff(y, want) < 0.05 * mag); /* int8, calibrated on x and z */
    oar_tensor_release(y);
    snprintf(args, sizeof args, "quantize %s %s --calib %s", model, q, xp);
    expect_usage(args, "quantize", "--calib: batch 0 names 1 file; the model takes 2 inputs", NULL);
    oar_pool_pop(p);
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

/* Each kind of argument error: one line naming the argument and the
 * reason, one line pointing at the command's --help, exit status 2. */
static void test_errors(void) {
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    char md[4200], xp[4300], st[4300], txt[4300], a[16384];
    snprintf(md, sizeof md, "%s/err_model", dir);
    snprintf(xp, sizeof xp, "%s/err_x.npy", dir);
    snprintf(st, sizeof st, "%s/err.safetensors", dir);
    snprintf(txt, sizeof txt, "%s/notes.txt", dir);
    CHECK(oar_graph_save(g, md) == 0);
    oar_graph_free(g);
    oar_pool *p = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){3, 8});
    CHECK(oar_npy_save(xp, x) == 0);
    CHECK(oar_safetensors_save(st, 1, (const char *[]){"x"}, &x) == 0);
    oar_pool_pop(p);
    spit_text(txt, "not a model\n");

    /* run */
    snprintf(a, sizeof a, "run %s --input x", md);
    expect_usage(a, "run", "--input: expected a .npy file, got 'x'", NULL);
    snprintf(a, sizeof a, "run %s --input=y.txt", md);
    expect_usage(a, "run", "--input: expected a .npy file, got 'y.txt'", NULL);
    snprintf(a, sizeof a, "run %s --input %s --output y.csv", md, xp);
    expect_usage(a, "run", "--output: expected a .npy file, got 'y.csv'", NULL);
    snprintf(a, sizeof a, "run %s", md);
    expect_usage(a, "run", "--input: missing", NULL);
    snprintf(a, sizeof a, "run %s --input", md);
    expect_usage(a, "run", "--input: needs a value", NULL);
    snprintf(a, sizeof a, "run %s --input %s --frobnicate", md, xp);
    expect_usage(a, "run", "--frobnicate: unknown option", NULL);
    snprintf(a, sizeof a, "run %s --input %s --input %s", md, xp, xp);
    expect_usage(a, "run", "--input: the model takes 1 input (x), got 2", NULL);
    snprintf(a, sizeof a, "run %s --input %s --output %s/a.npy --output %s/b.npy", md, xp, dir, dir);
    expect_usage(a, "run", "--output: the model gives 1 output, got 2", NULL);
    snprintf(a, sizeof a, "run %s %s --input %s", md, md, xp);
    expect_usage(a, "run", md, "unexpected argument");
    expect_usage("run --input x.npy", "run", "MODEL: missing (a saved-model folder or an .onnx file)", NULL);
    /* the complaint of the issue: a weights file given as a model */
    snprintf(a, sizeof a, "run %s --input %s", st, xp);
    expect_usage(a, "run", "MODEL: expected a saved-model folder or an .onnx file, got '", "err.safetensors'");
    snprintf(a, sizeof a, "graph %s", xp);
    expect_usage(a, "graph", "MODEL: expected a saved-model folder or an .onnx file", "err_x.npy'");
    /* bench */
    snprintf(a, sizeof a, "bench %s --batch abc", md);
    expect_usage(a, "bench", "--batch: expected an integer >= 1, got 'abc'", NULL);
    snprintf(a, sizeof a, "bench %s --batch=0", md);
    expect_usage(a, "bench", "--batch: expected an integer >= 1, got '0'", NULL);
    snprintf(a, sizeof a, "bench %s --batch 2,2", md);
    expect_usage(a, "bench", "--batch: 2 twice in '2,2'", NULL);
    snprintf(a, sizeof a, "bench %s --batch 2,", md);
    expect_usage(a, "bench", "--batch: expected an integer >= 1, got ''", NULL);
    snprintf(a, sizeof a, "bench %s --batch 1,2,3,4,5,6,7,8,9", md);
    expect_usage(a, "bench", "--batch: at most 8 sizes, got '1,2,3,4,5,6,7,8,9'", NULL);
    snprintf(a, sizeof a, "bench %s --iters 2x", md);
    expect_usage(a, "bench", "--iters: expected an integer >= 1, got '2x'", NULL);
    snprintf(a, sizeof a, "bench %s --warmup -1", md);
    expect_usage(a, "bench", "--warmup: expected an integer >= 0, got '-1'", NULL);
    snprintf(a, sizeof a, "bench %s --threads 99999", md);
    expect_usage(a, "bench", "--threads: expected an integer in 0..4096, got '99999'", NULL);
    snprintf(a, sizeof a, "bench %s --kernels", md);
    expect_usage(a, "bench", "--kernels: unknown option", NULL);
    /* graph, info, export, devices, plot */
    snprintf(a, sizeof a, "graph %s --input %s", md, xp);
    expect_usage(a, "graph", "--input: unknown option", NULL);
    expect_usage("info", "info", "FILE: missing", NULL);
    snprintf(a, sizeof a, "info %s %s", md, xp);
    expect_usage(a, "info", xp, "unexpected argument");
    snprintf(a, sizeof a, "info %s --batch 2", md);
    expect_usage(a, "info", "--batch: unknown option", NULL);
    snprintf(a, sizeof a, "info %s", txt);
    expect_usage(a, "info", "FILE: expected a saved-model folder or an .onnx, .safetensors or .npy file, got '",
                 "notes.txt'");
    snprintf(a, sizeof a, "export %s", md);
    expect_usage(a, "export", "OUT.onnx: missing", NULL);
    snprintf(a, sizeof a, "export %s %s/out.txt", md, dir);
    expect_usage(a, "export", "OUT.onnx: expected a file name ending .onnx", NULL);
    snprintf(a, sizeof a, "export %s %s/o.onnx --opset x", md, dir);
    expect_usage(a, "export", "--opset: expected an integer in 13..17, got 'x'", NULL);
    snprintf(a, sizeof a, "export %s %s/o.onnx --opset 9", md, dir);
    expect_usage(a, "export", "--opset: opset 9 is not supported; expected 13..17", NULL);
    expect_usage("devices all", "devices", "all: unexpected argument", NULL);
    expect_usage("plot", "plot", "LOG: missing", NULL);
    expect_usage("plot a.jsonl -o a.png", "plot", "-o: expected an .svg or .html file, got 'a.png'", NULL);
    expect_usage("plot a.jsonl --metric", "plot", "--metric: needs a value", NULL);
    /* the command itself */
    expect_usage("frobnicate x", NULL, "frobnicate: unknown command; the commands are info, run,", NULL);
    expect_usage("--frobnicate", NULL, "--frobnicate: unknown option", NULL);
    expect_usage("help frobnicate", NULL, "frobnicate: unknown command", NULL);
    /* no arguments at all: the usage, on stderr, exit 2 */
    int rc;
    char *out = oar_run("", "2>/dev/null", &rc);
    CHECK(exit_status(rc) == 2 && !out[0]);
    free(out);
    out = oar_run("", "2>&1 >/dev/null", &rc);
    CHECK(exit_status(rc) == 2 && strstr(out, "usage: oar COMMAND"));
    free(out);
    oar_module_free(m);
}

/* --help (global and per command) prints the usage on stdout and exits 0;
 * --version prints the library's version, which is CMakeLists.txt's. */
static void test_help_version(void) {
    int rc;
    const char *global[] = {"--help", "-h", "help"};
    for (int i = 0; i < 3; i++) {
        char *out = oar_run(global[i], "2>/dev/null", &rc);
        CHECK(exit_status(rc) == 0 && !strncmp(out, "usage: oar COMMAND", 18));
        CHECK(strstr(out, "MODEL is a saved-model folder (written by oar_graph_save) or an .onnx file") != NULL);
        CHECK(strstr(out, "exit status: 0 success; 1 failure") && strstr(out, "2 usage error"));
        CHECK(strstr(out, "oar plot") && strstr(out, "oar info   FILE") && strstr(out, "--version"));
        free(out);
        out = oar_run(global[i], "2>&1 >/dev/null", &rc);
        CHECK(!out[0]); /* nothing on stderr */
        free(out);
    }
    const char *cmds[] = {"info", "run", "bench", "graph", "export", "plot", "devices"};
    for (int c = 0; c < 7; c++) {
        char a[100], want[100];
        snprintf(want, sizeof want, "usage: oar %s", cmds[c]);
        const char *forms[] = {"%s --help", "%s -h", "help %s", "%s x.npy --frobnicate --help"};
        for (int f = 0; f < 4; f++) {
            snprintf(a, sizeof a, forms[f], cmds[c]);
            char *out = oar_run(a, "2>/dev/null", &rc);
            bool ok = exit_status(rc) == 0 && !strncmp(out, want, strlen(want)) && strstr(out, "exit status: 0");
            CHECK(ok);
            if (!ok) fprintf(stderr, "  oar %s: exit %d:\n%s\n", a, exit_status(rc), out);
            free(out);
        }
    }
    char *out = oar_run("run --help", "2>/dev/null", &rc);
    CHECK(strstr(out, "saved-model folder or an .onnx file") && strstr(out, "--no-compile"));
    free(out);

    CHECK(!strcmp(oar_version(), OAR_VERSION));
    char want[64];
    snprintf(want, sizeof want, "oar %s\n", oar_version());
    out = oar_run("--version", "2>&1", &rc);
    CHECK(exit_status(rc) == 0 && !strcmp(out, want));
    free(out);
    /* the header's version is the project's (CTest runs this in tests/) */
    size_t n;
    char *cm = sm_slurp("../CMakeLists.txt", &n), *at = cm ? strstr(cm, "project(oar VERSION ") : NULL;
    CHECK(at != NULL);
    if (at) {
        at += strlen("project(oar VERSION ");
        size_t len = strcspn(at, " )");
        CHECK(len == strlen(OAR_VERSION) && !strncmp(at, OAR_VERSION, len));
    }
    free(cm);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", OAR_VERSION_MAJOR, OAR_VERSION_MINOR, OAR_VERSION_PATCH);
    CHECK(!strcmp(v, OAR_VERSION));
}

/* oar info on each kind of file oar reads, and on bad ones. */
static void test_info_kinds(void) {
    char path[4300], a[9000];
    int rc;
    char *out;
    oar_pool *p = oar_pool_push();
    /* safetensors: names, dtypes, shapes, metadata, totals */
    float wv[32];
    for (int i = 0; i < 32; i++) wv[i] = (float)i;
    int64_t step = 7;
    oar_tensor *ts[2] = {oar_tensor_from_data(wv, OAR_F32, 2, (int64_t[]){4, 8}),
                         oar_tensor_from_data(&step, OAR_I64, 0, NULL)};
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    CHECK(oar_safetensors_save_meta(path, 2, (const char *[]){"fc.weight", "step"}, ts, 1, (const char *[]){"epoch"},
                                    (const char *[]){"3"}) == 0);
    snprintf(a, sizeof a, "info %s", path);
    out = oar_cmd(a, &rc);
    CHECK(rc == 0 && strstr(out, "safetensors: ") && strstr(out, "ckpt.safetensors ("));
    CHECK(strstr(out, "metadata:\n") && strstr(out, "  format: oar\n") && strstr(out, "  epoch: 3\n"));
    CHECK(strstr(out, "tensors: 2\n") && strstr(out, "fc.weight  F32   [4, 8]  128 bytes\n"));
    CHECK(strstr(out, "step       I64   []  8 bytes\n") != NULL);
    CHECK(strstr(out, "total: 2 tensors, 33 values, 136 bytes of data\n") != NULL);
    CHECK(!strstr(out, "cannot open") && !strstr(out, "Not a directory"));
    if (!strstr(out, "total: 2 tensors")) fprintf(stderr, "%s\n", out);
    free(out);
    /* the same bytes under another name: known by its header */
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    CHECK(oar_safetensors_save(path, 1, (const char *[]){"w"}, ts) == 0);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 0, "safetensors: ", "\n  w     F32   [4, 8]  128 bytes\n", "metadata:\n  format: oar\ntensors: 1\n");
    /* a dtype oar does not load: described, with a note */
    const char hdr[] = "{\"q\":{\"dtype\":\"I16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    char buf[256] = {0};
    buf[0] = (char)(sizeof hdr - 1);
    memcpy(buf + 8, hdr, sizeof hdr - 1);
    memcpy(buf + 8 + sizeof hdr - 1, "\1\0\2\0\3\0", 6);
    snprintf(path, sizeof path, "%s/int16.safetensors", dir);
    sm_spit(path, buf, 8 + sizeof hdr - 1 + 6);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 0, "q     I16   [3]  6 bytes  (a dtype oar does not load)", "note: oar_safetensors_load refuses",
           NULL);
    /* bad files: exit 1, naming the file and the problem */
    const char bad_off[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,100]}}";
    memset(buf, 0, sizeof buf);
    buf[0] = (char)(sizeof bad_off - 1);
    memcpy(buf + 8, bad_off, sizeof bad_off - 1);
    snprintf(path, sizeof path, "%s/bad_off.safetensors", dir);
    sm_spit(path, buf, 8 + sizeof bad_off - 1 + 100);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 1, "oar info: ", "bad_off.safetensors: tensor \"w\": F32 of 32 values needs 128 bytes, its data_offsets "
                               "give 100", NULL);
    memset(buf, 0, sizeof buf);
    buf[0] = (char)0xe8, buf[1] = 3; /* a header of 1000 bytes */
    memcpy(buf + 8, "{}", 2);
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    sm_spit(path, buf, 10);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 1, "short.safetensors: not a safetensors file: the header's length 1000 is over what the file holds",
           NULL, NULL);
    snprintf(path, sizeof path, "%s/text.safetensors", dir);
    spit_text(path, "hello");
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 1, "text.safetensors: not a safetensors file: 5 bytes", NULL, NULL);

    /* npy: dtype, shape, values, statistics */
    float nv[10];
    for (int i = 0; i < 10; i++) nv[i] = 0.5f * (float)i;
    snprintf(path, sizeof path, "%s/v.npy", dir);
    CHECK(oar_npy_save(path, oar_tensor_from_data(nv, OAR_F32, 2, (int64_t[]){2, 5})) == 0);
    snprintf(a, sizeof a, "info %s", path);
    out = oar_cmd(a, &rc);
    CHECK(rc == 0 && strstr(out, "npy: ") && strstr(out, "dtype: float32\n"));
    CHECK(strstr(out, "shape: [2, 5] (10 values, 40 bytes)\n") != NULL);
    CHECK(strstr(out, "values: 0, 0.5, 1, 1.5, 2, 2.5, ..., 4, 4.5\n") != NULL);
    CHECK(strstr(out, "min 0  max 4.5  mean 2.25  std 1.43614\n") != NULL);
    if (!strstr(out, "std 1.43614")) fprintf(stderr, "%s\n", out);
    free(out);
    double dv[3] = {1, NAN, 3};
    snprintf(path, sizeof path, "%s/nan.npy", dir);
    CHECK(oar_npy_save(path, oar_tensor_from_data(dv, OAR_F64, 1, (int64_t[]){3})) == 0);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 0, "values: 1, nan, 3\n", "min 1  max 3  mean 2  std 1\n", "non-finite: 1 NaN, 0 inf");
    int64_t iv[2] = {INT64_MAX, -5};
    snprintf(path, sizeof path, "%s/i.npy", dir);
    CHECK(oar_npy_save(path, oar_tensor_from_data(iv, OAR_I64, 1, (int64_t[]){2})) == 0);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 0, "dtype: int64", "values: 9223372036854775807, -5\n", NULL);
    snprintf(path, sizeof path, "%s/garbage.npy", dir);
    spit_text(path, "this is not numpy");
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 1, "oar info: ", "garbage.npy", NULL);

    /* ONNX: what a model folder gets */
    oar_module *m = make_mlp();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(m, &s);
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    CHECK(oar_onnx_export(g, path, &(oar_onnx_export_options){0}) == 0);
    snprintf(a, sizeof a, "info %s", path);
    expect(a, 0, "(ONNX file)", "input  0: x float32 [?, 8]", "output 0: y float32 [?, 4]");
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* A short oar_fit run writes a log (3 epochs, evaluated, with accuracy). */
static int fit_log(const char *path) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){64, 8});
    oar_tensor *y = oar_remainder(oar_arange(0, 64, 1, OAR_I64), oar_scalar(4));
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    oar_loader *ld = oar_loader_new(ds, &(oar_loader_options){.batch_size = 16});
    oar_module *m = make_mlp();
    oar_tensor *ps[8];
    int n = oar_module_parameters(m, ps, 8);
    oar_optimizer *opt = oar_adam_new(n, ps, &(oar_adam_options){.lr = 0.01});
    int st = oar_fit(m, opt, ld,
                     &(oar_fit_options){.epochs = 3, .eval_loader = ld, .accuracy = true, .log_path = path,
                                        .progress = OAR_PROGRESS_NONE},
                     NULL);
    oar_optim_free(opt);
    oar_module_free(m);
    oar_loader_free(ld);
    oar_dataset_free(ds);
    return st;
}

/* The <svg>...</svg> of text, NUL-ended in place (NULL if none). */
static char *svg_of(char *text) {
    char *a = strstr(text, "<svg"), *b = a ? strstr(a, "</svg>") : NULL;
    if (!b) return NULL;
    b[6] = 0;
    return a;
}

/* oar plot: curves of oar_fit's logs as SVG or HTML, and its failures. */
static void test_plot(void) {
    char fit[4300], hand[4300], py[4300], svg[4300], html[4300], a[16384], p[4300];
    int rc;
    size_t n;
    snprintf(fit, sizeof fit, "%s/fit.jsonl", dir);
    snprintf(hand, sizeof hand, "%s/hand & <co>.jsonl", dir);
    snprintf(py, sizeof py, "%s/py.jsonl", dir);
    snprintf(svg, sizeof svg, "%s/curves.svg", dir);
    snprintf(html, sizeof html, "%s/curves.html", dir);
    CHECK(fit_log(fit) == 0);
    /* as oar_fit writes it, an infinity as 1e999; a blank line is skipped */
    spit_text(hand, "{\"epoch\": 1, \"loss\": 1.5, \"acc\": 0.5, \"lr\": 0.01, \"samples_per_s\": 1000, \"time_s\": "
                    "0.5, \"best\": true, \"stop\": false}\n"
                    "{\"epoch\": 2, \"loss\": 1e999, \"acc\": 0.625, \"lr\": 0.01, \"samples_per_s\": 1000, "
                    "\"time_s\": 1, \"best\": false, \"stop\": false}\n\n"
                    "{\"epoch\": 3, \"loss\": 0.75, \"acc\": 0.75, \"lr\": 0.005, \"samples_per_s\": 1000, "
                    "\"time_s\": 1.5, \"best\": true, \"stop\": false}\n");
    /* two runs: one chart per family (loss with val_loss, acc with val_acc) */
    snprintf(a, sizeof a, "plot %s '%s' -o %s", fit, hand, svg);
    char *out = oar_cmd(a, &rc);
    CHECK(exit_status(rc) == 0 && strstr(out, "wrote ") && strstr(out, "(2 logs, 2 charts)"));
    CHECK(strstr(out, "note: ") && strstr(out, "skipped 1 non-finite value of loss (epoch 2)"));
    free(out);
    char *text = sm_slurp(svg, &n);
    CHECK(text && !strncmp(text, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39) && n > 7 &&
          !strcmp(text + n - 7, "</svg>\n"));
    CHECK(text && xml_well_formed(text));
    CHECK(text && count(text, "<polyline") == 6); /* fit: 4 metrics, hand: 2 */
    CHECK(text && count(text, "<g class=\"panel\"") == 2);
    CHECK(text && count(text, "<polyline class=\"run0\" fill=\"none\" stroke=\"#1f77b4\"") == 4);
    CHECK(text && count(text, "<polyline class=\"run1\" fill=\"none\" stroke=\"#ff7f0e\"") == 2);
    CHECK(text && count(text, "stroke-dasharray=\"6 4\" points=") == 2); /* val_loss, val_acc */
    CHECK(text && strstr(text, ">epoch</text>") && strstr(text, ">loss, val_loss</text>"));
    char *legend = text ? strstr(text, "<g class=\"legend\"") : NULL, *lend = legend ? strstr(legend, "</g>") : NULL;
    CHECK(lend != NULL);
    if (lend) {
        *lend = 0;
        CHECK(strstr(legend, fit) && strstr(legend, "hand &amp; &lt;co&gt;.jsonl") && strstr(legend, "validation"));
    }
    free(text);
    /* one metric: one polyline per run; the infinity is left out (2 points) */
    snprintf(a, sizeof a, "plot %s '%s' --metric loss -o %s", fit, hand, svg);
    expect(a, 0, "(2 logs, 1 chart)", NULL, NULL);
    text = sm_slurp(svg, &n);
    CHECK(text && xml_well_formed(text) && count(text, "<polyline") == 2 && count(text, "<circle") == 5);
    char *pl = text ? strstr(text, "<polyline class=\"run1\"") : NULL;
    pl = pl ? strstr(pl, "points=\"") : NULL;
    CHECK(pl != NULL);
    if (pl) {
        pl[8 + strcspn(pl + 8, "\"")] = 0;
        CHECK(count(pl, ",") == 2); /* two points */
    }
    free(text);
    /* --metric NAME,NAME and a key left out by default; SVG to stdout */
    snprintf(a, sizeof a, "plot %s --metric=loss,val_loss --metric lr", fit);
    out = oar_run(a, "2>/dev/null", &rc);
    CHECK(exit_status(rc) == 0 && !strncmp(out, "<svg", 4) && xml_well_formed(out));
    CHECK(count(out, "<polyline") == 3 && count(out, "<g class=\"panel\"") == 2);
    free(out);
    /* HTML: a page with the SVG and a summary table */
    snprintf(a, sizeof a, "plot %s '%s' -o %s", fit, hand, html);
    expect(a, 0, "wrote ", NULL, NULL);
    text = sm_slurp(html, &n);
    CHECK(text && !strncmp(text, "<!DOCTYPE html>", 15) && strstr(text, "</html>\n") && strstr(text, "<table>"));
    CHECK(text && strstr(text, "<th>val_loss</th>") && strstr(text, "<td>3</td>"));
    CHECK(text && strstr(text, "0.75 (best 0.75, epoch 3)")); /* hand's loss */
    char *inner = text ? svg_of(text) : NULL;
    CHECK(inner && xml_well_formed(inner) && count(inner, "<polyline") == 6);
    free(text);
    /* Python's NaN and Infinity: skipped with a note */
    spit_text(py, "{\"epoch\": 1, \"loss\": NaN}\n{\"epoch\": 2, \"loss\": 0.5}\n{\"epoch\": 3, \"loss\": -Infinity}\n");
    snprintf(a, sizeof a, "plot %s -o %s", py, svg);
    expect(a, 0, "skipped 2 non-finite values of loss (epochs 1, 3)", "(1 log, 1 chart)", NULL);
    /* an unfinished last line (training still writing): skipped with a note */
    snprintf(p, sizeof p, "%s/running.jsonl", dir);
    spit_text(p, "{\"epoch\": 1, \"loss\": 1}\n{\"epoch\": 2, \"lo");
    snprintf(a, sizeof a, "plot %s -o %s", p, svg);
    expect(a, 0, "running.jsonl:2: skipped an unfinished last line", NULL, NULL);

    /* failures: exit 1 naming the file (and line), no output file */
    remove(svg);
    expect("plot /nonexistent/log.jsonl -o /tmp/x.svg", 1,
           "oar plot: /nonexistent/log.jsonl: cannot open: No such file", NULL, NULL);
    struct {
        const char *name, *text, *want;
    } bad[] = {
        {"empty.jsonl", "", "empty.jsonl: no epochs in the log"},
        {"blank.jsonl", "\n  \n", "blank.jsonl: no epochs in the log"},
        {"garbled.jsonl", "{\"epoch\": 1, \"loss\": 1}\n{\"epoch\": 2, \"loss\": }\n",
         "garbled.jsonl:2: not valid JSON at column 22: '}'"},
        {"trailing.jsonl", "{\"epoch\": 1, \"loss\": 1} x\n", "trailing.jsonl:1: not valid JSON"},
        {"noepoch.jsonl", "{\"loss\": 1}\n", "noepoch.jsonl:1: no \"epoch\" number"},
        {"array.jsonl", "[1, 2]\n", "array.jsonl:1: expected a JSON object"},
        {"twice.jsonl", "{\"epoch\": 1, \"loss\": 1}\n{\"epoch\": 2, \"loss\": 1}\n{\"epoch\": 1, \"loss\": 1}\n",
         "twice.jsonl:3: epoch 1 after epoch 2"},
        {"binary.jsonl", NULL, "binary.jsonl:1: not a JSON-lines log"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, bad[k].name);
        if (bad[k].text) spit_text(p, bad[k].text);
        else sm_spit(p, "{\"epoch\"\0\1\2\n", 12);
        snprintf(a, sizeof a, "plot %s -o %s", p, svg);
        expect(a, 1, "oar plot: ", bad[k].want, NULL);
    }
    snprintf(a, sizeof a, "plot %s -o %s", dir, svg);
    expect(a, 1, "is a folder; expected a JSON-lines log", NULL, NULL);
    snprintf(p, sizeof p, "%s/timeonly.jsonl", dir);
    spit_text(p, "{\"epoch\": 1, \"time_s\": 1}\n");
    snprintf(a, sizeof a, "plot %s -o %s", p, svg);
    expect(a, 1, "no metrics to draw (only time_s); name one with --metric", NULL, NULL);
    CHECK(access(svg, F_OK) != 0);
    /* an unknown metric is a usage error listing the metrics there are */
    snprintf(a, sizeof a, "plot '%s' --metric bogus -o %s", hand, svg);
    expect_usage(a, "plot", "--metric: no log has 'bogus'; it has loss, acc, lr, samples_per_s, time_s", NULL);
    CHECK(access(svg, F_OK) != 0);
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
    RUN(test_quantize);
    RUN(test_quantize_two_inputs);
    RUN(test_forged);
    RUN(test_errors);
    RUN(test_help_version);
    RUN(test_info_kinds);
    RUN(test_plot);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}

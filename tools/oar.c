/* The oar command line: inspect, run, benchmark and print saved models.
 *
 *   oar info  MODEL
 *   oar run   MODEL --input x.npy [--input ...] --output y.npy [--output ...]
 *   oar bench MODEL [--batch N] [--iters K] [--warmup W] [--threads T]
 *   oar graph MODEL [--optimize] [--kernels]
 *   oar export MODEL out.onnx [--opset N] [--optimize]
 *
 * MODEL is a folder written by oar_graph_save (or an .onnx file). run and
 * bench use the predictor with the inference passes (--no-optimize turns
 * them off) and compiled kernels (--no-compile runs the graph unfused);
 * graph --kernels prints the C the compiler generates. */
#include <oar/oar.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/onnx.h> /* onnx branch: .onnx files */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int usage(void) {
    fprintf(stderr,
            "usage: oar info  MODEL\n"
            "       oar run   MODEL --input x.npy [--input ...] --output y.npy [--output ...] [--no-optimize]\n"
            "                 [--no-compile]\n"
            "       oar bench MODEL [--batch N] [--iters K] [--warmup W] [--threads T] [--no-optimize]\n"
            "                 [--no-compile]\n"
            "       oar graph MODEL [--optimize] [--kernels]\n"
            "       oar export MODEL out.onnx [--opset N (13..17, default 17)] [--optimize]\n"
            "       oar devices   (devices, loaded plugins, plugins that failed and why)\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "oar: %s: %s\n", what, oar_last_error());
    return 1;
}

static void print_shape(int ndim, const int64_t *shape) {
    printf("[");
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) printf("%s?", d ? ", " : "");
        else printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    printf("]");
}

/* onnx branch: a path ending in .onnx is an ONNX model, else a model folder. */
static bool is_onnx(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".onnx");
}
static oar_graph *load_graph(const char *path) { return is_onnx(path) ? oar_onnx_load(path) : oar_graph_load(path); }

static int cmd_info(const char *dir) {
    oar_graph *g = load_graph(dir);
    if (!g) return fail("info");
    printf("model: %s\n", dir);
    int64_t shape[OAR_MAX_DIMS];
    oar_dtype dt;
    for (int i = 0; i < oar_graph_num_inputs(g); i++) {
        int nd = oar_graph_input_shape(g, i, &dt, shape);
        printf("input  %d: %s %s ", i, oar_graph_input_name(g, i), oar_dtype_name(dt));
        print_shape(nd, shape);
        printf("\n");
    }
    for (int j = 0; j < oar_graph_num_outputs(g); j++) {
        int nd = oar_graph_output_shape(g, j, &dt, shape);
        printf("output %d: %s %s ", j, oar_graph_output_name(g, j), oar_dtype_name(dt));
        print_shape(nd, shape);
        printf("\n");
    }
    printf("nodes: %d\nconstants: %d\n", oar_graph_num_nodes(g), oar_graph_num_constants(g));
    /* the arena the executor plans for batch 1 (dynamic dims set to 1) */
    oar_executor *ex = oar_executor_new(g);
    oar_tensor *x[64] = {0}, *y[64];
    int ni = oar_graph_num_inputs(g), ok = ex && ni <= 64;
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < ni && ok; i++) {
        int nd = oar_graph_input_shape(g, i, &dt, shape);
        for (int d = 0; d < nd; d++)
            if (shape[d] < 0) shape[d] = 1;
        ok = (x[i] = oar_zeros(dt, nd, shape)) != NULL;
    }
    if (ok && !oar_executor_run(ex, x, y))
        printf("arena at batch 1: %lld bytes (%lld without reuse)\n", (long long)oar_executor_planned_bytes(ex),
               (long long)oar_executor_unplanned_bytes(ex));
    oar_pool_pop(pool);
    oar_executor_free(ex);
    oar_graph_free(g);
    return 0;
}

/* The graph, or with --kernels the C the compiler generates for it (after
 * the inference passes, as the predictor runs it). */
static int cmd_graph(const char *dir, bool optimize, bool kernels) {
    oar_graph *g = load_graph(dir);
    if (!g) return fail("graph");
    if ((optimize || kernels) && oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0)) {
        oar_graph_free(g);
        return fail("graph");
    }
    int rc = 0;
    if (kernels) {
        oar_executor *ex = oar_executor_new(g);
        if (!ex || oar_executor_compile(ex)) rc = fail("graph");
        else if (!oar_executor_is_compiled(ex)) printf("/* nothing compiled: no fusible group, or no C compiler */\n");
        else printf("/* %d kernel launches per run */\n%s", oar_executor_num_kernels(ex), oar_executor_kernel_source(ex));
        oar_executor_free(ex);
    } else {
        oar_graph_print(g, stdout);
    }
    oar_graph_free(g);
    return rc;
}

static int cmd_run(const char *dir, int n_in, char **ins, int n_out, char **outs, bool optimize, bool compile) {
    oar_predictor_config cfg = {.model_dir = dir, .optimize = optimize, .no_compile = !compile};
    oar_predictor *p = NULL;
    if (is_onnx(dir)) { /* onnx branch */
        oar_graph *g = oar_onnx_load(dir);
        if (g) p = oar_predictor_from_graph(g, &cfg);
        oar_graph_free(g);
    } else {
        p = oar_predictor_create(&cfg);
    }
    if (!p) return fail("run");
    int rc = 0, ni = oar_predictor_num_inputs(p), no = oar_predictor_num_outputs(p);
    oar_tensor *x[64] = {0}, *y[64] = {0};
    if (n_in != ni || n_out > no || ni > 64 || no > 64) {
        fprintf(stderr, "oar: run: the model takes %d inputs and gives %d outputs; got %d --input and "
                        "%d --output\n", ni, no, n_in, n_out);
        rc = 2;
        goto done;
    }
    for (int i = 0; i < n_in; i++)
        if (!(x[i] = oar_npy_load(ins[i]))) {
            rc = fail("run");
            goto done;
        }
    if (oar_predictor_run(p, x, y)) {
        rc = fail("run");
        goto done;
    }
    for (int j = 0; j < n_out; j++)
        if (oar_npy_save(outs[j], y[j])) {
            rc = fail("run");
            goto done;
        }
    for (int j = 0; j < no; j++) {
        printf("%s: %s ", oar_predictor_output_name(p, j), oar_dtype_name(oar_tensor_dtype(y[j])));
        print_shape(oar_tensor_ndim(y[j]), oar_tensor_shape(y[j]));
        printf("%s%s\n", j < n_out ? " -> " : "", j < n_out ? outs[j] : "");
    }
done:
    for (int i = 0; i < 64; i++) {
        oar_tensor_release(x[i]);
        oar_tensor_release(y[i]);
    }
    oar_predictor_free(p);
    return rc;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_bench(const char *dir, int64_t batch, int iters, int warmup, int threads, bool optimize,
                     bool compile) {
    oar_predictor_config cfg = {.model_dir = dir, .optimize = optimize, .num_threads = threads, .no_compile = !compile};
    oar_predictor *p = NULL;
    if (is_onnx(dir)) {
        oar_graph *g = oar_onnx_load(dir);
        if (g) p = oar_predictor_from_graph(g, &cfg);
        oar_graph_free(g);
    } else {
        p = oar_predictor_create(&cfg);
    }
    if (!p) return fail("bench");
    int ni = oar_predictor_num_inputs(p), no = oar_predictor_num_outputs(p), rc = 0;
    oar_tensor *x[64] = {0}, *y[64] = {0};
    double *lat = calloc((size_t)iters, sizeof *lat);
    if (ni > 64 || no > 64 || !lat) {
        fprintf(stderr, "oar: bench: too many inputs or outputs\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        int64_t shape[OAR_MAX_DIMS];
        oar_dtype dt;
        int nd = oar_predictor_input_shape(p, i, &dt, shape);
        for (int d = 0; d < nd; d++)
            if (shape[d] < 0) shape[d] = batch;
        oar_pool *pool = oar_pool_push();
        x[i] = oar_tensor_retain(oar_dtype_is_float(dt) ? oar_cast(oar_randn(OAR_F32, nd, shape), dt)
                                                        : oar_zeros(dt, nd, shape));
        oar_pool_pop(pool);
        if (!x[i]) {
            rc = fail("bench");
            goto done;
        }
    }
    for (int r = 0; r < warmup + iters && !rc; r++) {
        double t0 = now();
        if (oar_predictor_run_borrowed(p, x, y)) rc = fail("bench");
        if (r >= warmup) lat[r - warmup] = now() - t0;
    }
    if (!rc) {
        double total = 0;
        for (int r = 0; r < iters; r++) total += lat[r];
        qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
#define PCT(q) (1e3 * lat[(int)fmin(iters - 1, floor((q) * iters))])
        printf("model: %s  batch %lld  iters %d  threads %d  %s\n", dir, (long long)batch, iters, threads,
               oar_predictor_is_compiled(p) ? "compiled" : "unfused");
        printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  max %.3f\n",
               1e3 * total / iters, PCT(0.50), PCT(0.90), PCT(0.99), 1e3 * lat[0], 1e3 * lat[iters - 1]);
        printf("throughput: %.1f samples/s\n", (double)batch * iters / total);
    }
done:
    for (int i = 0; i < 64; i++) oar_tensor_release(x[i]);
    free(lat);
    oar_predictor_free(p);
    return rc;
}

/* Every device and plugin, and every plugin that failed to load with its reason. */
static int cmd_devices(void) {
    int need = oar_device_report(NULL, 0);
    char *buf = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!buf) return fail("devices");
    oar_device_report(buf, (size_t)need + 1);
    fputs(buf, stdout);
    if (need > 0 && buf[need - 1] != '\n') putchar('\n');
    free(buf);
    return 0;
}

/* onnxexport branch: oar export MODEL out.onnx [--opset N] [--optimize]. MODEL
 * is a model folder (or an .onnx file); --optimize runs the inference passes
 * first. */
static int cmd_export(int argc, char **argv) {
    if (argc < 4) return usage();
    int opset = 0;
    bool optimize = false;
    for (int a = 4; a < argc; a++) {
        if (!strcmp(argv[a], "--optimize")) optimize = true;
        else if (!strcmp(argv[a], "--opset") && a + 1 < argc) opset = atoi(argv[++a]);
        else return usage();
    }
    oar_graph *g = load_graph(argv[2]);
    if (!g) return fail("export");
    int st = optimize ? oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) : 0;
    if (!st) st = oar_onnx_export(g, argv[3], &(oar_onnx_export_options){.opset = opset});
    if (!st) printf("wrote %s (opset %d, %d oar nodes)\n", argv[3], opset ? opset : 17, oar_graph_num_nodes(g));
    oar_graph_free(g);
    return st ? fail("export") : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "devices")) return cmd_devices();
    if (argc >= 2 && !strcmp(argv[1], "export")) return cmd_export(argc, argv); /* onnxexport branch */
    if (argc < 3) return usage();
    const char *cmd = argv[1], *dir = argv[2];
    char *ins[64], *outs[64];
    int n_in = 0, n_out = 0, iters = 100, warmup = 10, threads = 0;
    int64_t batch = 1;
    bool optimize = true, graph_optimize = false, compile = true, kernels = false;
    for (int a = 3; a < argc; a++) {
        const char *o = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(o, "--no-optimize")) optimize = false;
        else if (!strcmp(o, "--no-compile")) compile = false;
        else if (!strcmp(o, "--kernels")) kernels = true;
        else if (!strcmp(o, "--optimize")) graph_optimize = true;
        else if (!v) return usage();
        else if (!strcmp(o, "--input") && n_in < 64) ins[n_in++] = argv[++a];
        else if (!strcmp(o, "--output") && n_out < 64) outs[n_out++] = argv[++a];
        else if (!strcmp(o, "--batch")) batch = atoll(argv[++a]);
        else if (!strcmp(o, "--iters")) iters = atoi(argv[++a]);
        else if (!strcmp(o, "--warmup")) warmup = atoi(argv[++a]);
        else if (!strcmp(o, "--threads")) threads = atoi(argv[++a]);
        else return usage();
    }
    if (batch < 1 || iters < 1 || warmup < 0 || threads < 0) return usage();
    if (!strcmp(cmd, "info")) return cmd_info(dir);
    if (!strcmp(cmd, "graph")) return cmd_graph(dir, graph_optimize, kernels);
    if (!strcmp(cmd, "run")) {
        if (!n_in) return usage();
        return cmd_run(dir, n_in, ins, n_out, outs, optimize, compile);
    }
    if (!strcmp(cmd, "bench")) return cmd_bench(dir, batch, iters, warmup, threads, optimize, compile);
    return usage();
}

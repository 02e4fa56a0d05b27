/* The oar command line: describe files, run, benchmark, print and export
 * models, plot training logs (docs/cli.md).
 *
 *   oar info   FILE          (a model folder, .onnx, .safetensors, .npy)
 *   oar run    MODEL --input x.npy [--input ...] [--output y.npy ...]
 *   oar bench  MODEL [--batch N] [--iters K] [--warmup W] [--threads T]
 *   oar graph  MODEL [--optimize] [--kernels]
 *   oar export MODEL out.onnx [--opset N] [--optimize]
 *   oar plot   LOG... [-o out.svg|out.html] [--metric NAME]...
 *   oar devices
 *
 * MODEL is a folder written by oar_graph_save or an .onnx file. run and
 * bench use the predictor with the inference passes (--no-optimize turns
 * them off) and compiled kernels (--no-compile runs the graph unfused);
 * graph --kernels prints the C the compiler generates.
 *
 * Every command parses its own arguments; a bad one gets one line naming it
 * and the reason, then a pointer to the command's --help, and exit status 2
 * (tools/cli.h lists the statuses). */
#include "cli.h"

#include <oar/oar.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/onnx.h> /* onnx branch: .onnx files */
#include <oar/quant.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- messages -------------------------------------------------------------- */

int cli_usage_error(const char *cmd, const char *arg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "oar%s%s: %s: ", cmd ? " " : "", cmd ? cmd : "", arg);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee 'oar%s%s --help'\n", cmd ? " " : "", cmd ? cmd : "");
    return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "oar %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_FAIL;
}

void cli_note(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "oar %s: note: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* A library call failed: its message. */
static int fail(const char *cmd) { return cli_fail(cmd, "%s", oar_last_error()); }

/* ---- help ------------------------------------------------------------------ */

#define EXIT_TEXT                                                                                  \
    "exit status: 0 success; 1 failure (a file that cannot be read, written or parsed, a model\n"  \
    "that fails to load or run); 2 usage error (an unknown command or option, a missing or\n"     \
    "malformed argument, a file of a kind the command does not take)\n"

static const char usage_text[] =
    "usage: oar COMMAND [ARGUMENTS]      (oar COMMAND --help: one command in full)\n"
    "\n"
    "  oar info   FILE                   describe a model folder, an .onnx, .safetensors or .npy file\n"
    "  oar run    MODEL --input X.npy [--input ...] [--output Y.npy ...] [--no-optimize] [--no-compile]\n"
    "  oar bench  MODEL [--batch N] [--iters K] [--warmup W] [--threads T] [--no-optimize]\n"
    "                   [--no-compile]\n"
    "  oar graph  MODEL [--optimize] [--kernels]\n"
    "  oar export MODEL OUT.onnx [--opset N (13..17, default 17)] [--optimize]\n"
    "  oar plot   LOG... [-o OUT.svg|OUT.html] [--metric NAME]...\n"
    "  oar devices                       devices, loaded plugins, plugins that failed and why\n"
    "  oar plan   MODEL --devices N [--mem 80G] [--batch B] ...   choose a parallel strategy\n"
    "  oar quantize MODEL OUT --calib X.npy[,Y.npy...] [--calib ...] [--method minmax|percentile|entropy]\n"
    "                   [--per-tensor]       post-training int8 quantization into a model folder\n"
    "  oar --version                     the version of oar\n"
    "\n"
    "MODEL is a saved-model folder (written by oar_graph_save) or an .onnx file.\n"
    "LOG is the JSON-lines log oar_fit writes (oar_fit_options.log_path).\n"
    "\n" EXIT_TEXT "docs/cli.md has the details and examples.\n";

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
    const char *help;
} command;

static const char info_help[] =
    "usage: oar info FILE\n"
    "\n"
    "Describes FILE, by its kind:\n"
    "  a saved-model folder or an .onnx file: its inputs and outputs (name, dtype, shape;\n"
    "      ? is a dynamic dim), node and constant counts, the memory planned at batch 1\n"
    "  a .safetensors file: metadata, each tensor's name, dtype, shape and bytes, the totals\n"
    "      (only the header is read)\n"
    "  a .npy file: dtype, shape, the first values, min, max, mean and standard deviation\n"
    "\n"
    "examples:\n"
    "  oar info demo-out/fashion-cnn\n"
    "  oar info model.onnx\n"
    "  oar info checkpoint.safetensors\n"
    "  oar info x.npy\n"
    "\n" EXIT_TEXT;

static const char run_help[] =
    "usage: oar run MODEL --input X.npy [--input ...] [--output Y.npy ...] [--no-optimize] [--no-compile]\n"
    "\n"
    "Runs MODEL (a saved-model folder or an .onnx file) through the predictor on the .npy\n"
    "inputs, one --input per model input in order, writes the first outputs to the --output\n"
    "files (one per output, in order; fewer is fine) and prints each output's dtype and shape.\n"
    "\n"
    "  --input X.npy    a model input (NumPy .npy)\n"
    "  --output Y.npy   where the next output goes (NumPy .npy)\n"
    "  --no-optimize    skip the inference passes\n"
    "  --no-compile     run the graph unfused (no generated kernels)\n"
    "\n"
    "example:\n"
    "  oar run demo-out/fashion-cnn --input x.npy --output y.npy\n"
    "\n" EXIT_TEXT;

static const char quantize_help[] =
    "usage: oar quantize MODEL OUT --calib X.npy[,Y.npy...] [--calib ...]\n"
    "                    [--method minmax|percentile|entropy] [--per-tensor]\n"
    "\n"
    "Post-training quantization: loads MODEL (a saved-model folder or an .onnx file), runs\n"
    "the inference passes (batch norm folds into the convolutions), calibrates the\n"
    "activations on the --calib batches (each one .npy file per model input), turns\n"
    "every Linear / matmul by a constant weight and every conv2d into an int8 product\n"
    "(oar_graph_quantize: uint8 activations, int8 weights per output channel) and saves the\n"
    "model to the folder OUT, which `oar run`, `oar bench` and the predictor serve.\n"
    "\n"
    "  --calib X.npy[,Y.npy...]\n"
    "                   a calibration batch: one NumPy .npy per model input, in the model's\n"
    "                   input order, comma-separated (the inputs' dtypes and shapes)\n"
    "  --method M       activation ranges: minmax (default), percentile (99.99), entropy\n"
    "  --per-tensor     one weight scale per layer instead of one per output channel\n"
    "\n"
    "example:\n"
    "  oar quantize demo-out/fashion-cnn cnn-int8 --calib calib.npy --method entropy\n"
    "\n" EXIT_TEXT;

static const char bench_help[] =
    "usage: oar bench MODEL [--batch N[,N...]] [--iters K] [--warmup W] [--threads T] [--no-optimize]\n"
    "                 [--no-compile]\n"
    "\n"
    "Times MODEL (a saved-model folder or an .onnx file) on random inputs (dynamic dims set\n"
    "to the batch) and prints the latency (mean, p50, p90, p99, min, max) and throughput.\n"
    "\n"
    "  --batch N      the size of dynamic dims (default 1); convolutions are packed for it.\n"
    "                 A list (1,32; up to 8 sizes) times each size on one predictor that\n"
    "                 packs for every one of them\n"
    "  --iters K      timed runs (default 100)\n"
    "  --warmup W     untimed runs first (default 10)\n"
    "  --threads T    threads (default 0: the library's choice)\n"
    "  --no-optimize  skip the inference passes\n"
    "  --no-compile   run the graph unfused\n"
    "\n"
    "example:\n"
    "  oar bench resnet18.onnx --batch 8 --iters 50 --threads 2\n"
    "\n" EXIT_TEXT;

static const char graph_help[] =
    "usage: oar graph MODEL [--optimize] [--kernels]\n"
    "\n"
    "Prints the graph of MODEL (a saved-model folder or an .onnx file), one node a line.\n"
    "\n"
    "  --optimize   after the inference passes\n"
    "  --kernels    the C the compiler generates for it instead (after the passes)\n"
    "\n"
    "example:\n"
    "  oar graph demo-out/fashion-cnn --optimize\n"
    "\n" EXIT_TEXT;

static const char export_help[] =
    "usage: oar export MODEL OUT.onnx [--opset N] [--optimize]\n"
    "\n"
    "Writes MODEL (a saved-model folder or an .onnx file) as an ONNX model.\n"
    "\n"
    "  --opset N    the opset, 13..17 (default 17)\n"
    "  --optimize   run the inference passes first\n"
    "\n"
    "example:\n"
    "  oar export demo-out/fashion-cnn fashion-cnn.onnx --opset 13\n"
    "\n" EXIT_TEXT;

static const char plot_help[] =
    "usage: oar plot LOG... [-o OUT.svg|OUT.html] [--metric NAME]...\n"
    "\n"
    "Draws the training curves of one or more oar_fit logs (the JSON lines oar_fit writes\n"
    "when oar_fit_options.log_path is set): one chart per metric against the epoch, one\n"
    "colour per log (the legend names the files), val_ metrics dashed in their training\n"
    "metric's chart. Non-finite values are skipped with a note.\n"
    "\n"
    "  -o, --output OUT   an .svg file, or an .html page embedding the SVG and a summary\n"
    "                     table; without it the SVG goes to the standard output\n"
    "  --metric NAME      a metric to draw (repeat it, or NAME,NAME); default: all but\n"
    "                     lr, samples_per_s and time_s\n"
    "\n"
    "examples:\n"
    "  oar plot train.jsonl -o train.svg\n"
    "  oar plot base.jsonl wide.jsonl --metric loss --metric val_loss -o compare.html\n"
    "\n" EXIT_TEXT;

static const char devices_help[] =
    "usage: oar devices\n"
    "\n"
    "Lists the devices, the loaded plugins and the plugins that failed to load, with why\n"
    "(plugins are found next to liboar and in OAR_PLUGIN_PATH).\n"
    "\n" EXIT_TEXT;

static bool is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

/* A command asked for its help (-h or --help before any "--"): prints it to
 * stdout; true. */
static bool wants_help(int argc, char **argv, const char *help) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (is_help(argv[i])) {
            fputs(help, stdout);
            return true;
        }
    return false;
}

/* ---- arguments ------------------------------------------------------------- */

bool cli_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

static bool is_onnx(const char *path) { return cli_ends_with(path, ".onnx"); }

/* argv[*i] is an option (starts with '-', not "-" alone). */
static bool is_option(const char *a) { return a[0] == '-' && a[1]; }

/* Whether argv[*i] is the option `name` (or its short form `alias`, may be
 * NULL), which takes a value: "NAME VALUE" or "NAME=VALUE". 1: it is, *val
 * set (and *i moved to the value); 0: it is not; -1: it is, but the value
 * is missing (the error printed). */
static int opt_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char *alias,
                     const char *what, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (!strncmp(a, name, n) && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (strcmp(a, name) && (!alias || strcmp(a, alias))) return 0;
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, a, "needs a value (%s)", what);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

/* v as an integer in lo..hi, or a usage error (returned; 0 on success). */
static int parse_int(const char *cmd, const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*v && !*end && !errno && x >= lo && x <= hi) {
        *out = x;
        return 0;
    }
    if (hi >= INT_MAX / 2) return cli_usage_error(cmd, opt, "expected an integer >= %lld, got '%s'", lo, v);
    return cli_usage_error(cmd, opt, "expected an integer in %lld..%lld, got '%s'", lo, hi, v);
}

static int unknown_option(const char *cmd, const char *a) { return cli_usage_error(cmd, a, "unknown option"); }

static int extra_argument(const char *cmd, const char *a, const char *takes) {
    return cli_usage_error(cmd, a, "unexpected argument (%s takes %s)", cmd, takes);
}

/* MODEL: a folder or an .onnx file. 0, or the status of the error printed. */
static int check_model(const char *cmd, const char *path) {
    if (!path)
        return cli_usage_error(cmd, "MODEL", "missing (a saved-model folder or an .onnx file)");
    struct stat st;
    if (stat(path, &st)) return cli_fail(cmd, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode) || is_onnx(path)) return 0;
    cli_file_kind k = cli_file_kind_of(path);
    return cli_usage_error(cmd, "MODEL", "expected a saved-model folder or an .onnx file, got '%s'%s", path,
                           k == CLI_FILE_SAFETENSORS ? " (weights only: 'oar info' describes it)"
                           : k == CLI_FILE_NPY       ? " (a NumPy array: an --input?)"
                                                     : "");
}

static oar_graph *load_graph(const char *path) { return is_onnx(path) ? oar_onnx_load(path) : oar_graph_load(path); }

static oar_predictor *load_predictor(const char *path, oar_predictor_config *cfg) {
    if (!is_onnx(path)) return oar_predictor_create(cfg);
    oar_graph *g = oar_onnx_load(path);
    oar_predictor *p = g ? oar_predictor_from_graph(g, cfg) : NULL;
    oar_graph_free(g);
    return p;
}

static void print_shape(int ndim, const int64_t *shape) {
    printf("[");
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) printf("%s?", d ? ", " : "");
        else printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    printf("]");
}

/* ---- info -------------------------------------------------------------------- */

static int info_model(const char *dir) {
    oar_graph *g = load_graph(dir);
    if (!g) return fail("info");
    printf("model: %s (%s)\n", dir, is_onnx(dir) ? "ONNX file" : "saved-model folder");
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
    return CLI_OK;
}

static int cmd_info(int argc, char **argv) {
    if (wants_help(argc, argv, info_help)) return CLI_OK;
    const char *file = NULL;
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && is_option(a)) return unknown_option("info", a);
        else if (file) return extra_argument("info", a, "one FILE");
        else file = a;
    }
    if (!file)
        return cli_usage_error("info", "FILE", "missing (a saved-model folder or an .onnx, .safetensors or .npy file)");
    switch (cli_file_kind_of(file)) {
    case CLI_FILE_MISSING: return cli_fail("info", "%s: cannot open: %s", file, strerror(errno));
    case CLI_FILE_FOLDER:
    case CLI_FILE_ONNX: return info_model(file);
    case CLI_FILE_SAFETENSORS: return cli_info_safetensors(file);
    case CLI_FILE_NPY: return cli_info_npy(file);
    case CLI_FILE_UNKNOWN: break;
    }
    return cli_usage_error("info", "FILE",
                           "expected a saved-model folder or an .onnx, .safetensors or .npy file, got '%s'", file);
}

/* ---- graph --------------------------------------------------------------------- */

/* The graph, or with --kernels the C the compiler generates for it (after
 * the inference passes, as the predictor runs it). */
static int cmd_graph(int argc, char **argv) {
    if (wants_help(argc, argv, graph_help)) return CLI_OK;
    const char *dir = NULL;
    bool optimize = false, kernels = false, opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && !strcmp(a, "--optimize")) optimize = true;
        else if (opts && !strcmp(a, "--kernels")) kernels = true;
        else if (opts && is_option(a)) return unknown_option("graph", a);
        else if (dir) return extra_argument("graph", a, "one MODEL");
        else dir = a;
    }
    int rc = check_model("graph", dir);
    if (rc) return rc;
    oar_graph *g = load_graph(dir);
    if (!g) return fail("graph");
    if ((optimize || kernels) && oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0)) {
        oar_graph_free(g);
        return fail("graph");
    }
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

/* ---- run ------------------------------------------------------------------------- */

#define MAX_IO 64

static int cmd_run(int argc, char **argv) {
    if (wants_help(argc, argv, run_help)) return CLI_OK;
    const char *dir = NULL, *ins[MAX_IO], *outs[MAX_IO], *v, *opt;
    int n_in = 0, n_out = 0, m;
    bool optimize = true, compile = true, opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && !strcmp(a, "--no-optimize")) optimize = false;
        else if (opts && !strcmp(a, "--no-compile")) compile = false;
        else if (opts && ((m = opt_value("run", argc, argv, &i, opt = "--input", NULL, "a .npy file", &v)) ||
                          (m = opt_value("run", argc, argv, &i, opt = "--output", NULL, "a .npy file", &v)))) {
            bool in = opt[2] == 'i';
            if (m < 0) return CLI_USAGE;
            if (!cli_ends_with(v, ".npy")) return cli_usage_error("run", opt, "expected a .npy file, got '%s'", v);
            if ((in ? n_in : n_out) == MAX_IO) return cli_usage_error("run", opt, "more than %d", MAX_IO);
            if (in) ins[n_in++] = v;
            else outs[n_out++] = v;
        } else if (opts && is_option(a)) return unknown_option("run", a);
        else if (dir) return extra_argument("run", a, "one MODEL; inputs go after --input");
        else dir = a;
    }
    int rc = check_model("run", dir);
    if (rc) return rc;
    if (!n_in) return cli_usage_error("run", "--input", "missing (one .npy file per model input, in order)");
    oar_predictor_config cfg = {.model_dir = dir, .optimize = optimize, .no_compile = !compile};
    oar_predictor *p = load_predictor(dir, &cfg);
    if (!p) return fail("run");
    int ni = oar_predictor_num_inputs(p), no = oar_predictor_num_outputs(p);
    oar_tensor *x[MAX_IO] = {0}, *y[MAX_IO] = {0};
    if (n_in != ni || ni > MAX_IO) {
        char names[512] = "";
        for (int i = 0; i < ni && strlen(names) < 400; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     oar_predictor_input_name(p, i));
        rc = cli_usage_error("run", "--input", "the model takes %d input%s (%s), got %d", ni, ni == 1 ? "" : "s",
                             names, n_in);
        goto done;
    }
    if (n_out > no) {
        rc = cli_usage_error("run", "--output", "the model gives %d output%s, got %d", no, no == 1 ? "" : "s", n_out);
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
    for (int i = 0; i < MAX_IO; i++) {
        oar_tensor_release(x[i]);
        oar_tensor_release(y[i]);
    }
    oar_predictor_free(p);
    return rc;
}

/* ---- bench ------------------------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --batch's "N" or "N,N,...": up to OAR_PREDICTOR_MAX_BATCHES distinct
 * sizes >= 1 into b; the count, or -1 after printing the usage error. */
static int parse_batches(const char *v, int64_t *b) {
    char item[32];
    int n = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        long long x;
        if (len >= sizeof item) return cli_usage_error("bench", "--batch", "expected integers >= 1, got '%s'", v), -1;
        memcpy(item, p, len);
        item[len] = 0;
        if (parse_int("bench", "--batch", item, 1, LLONG_MAX, &x)) return -1;
        if (n == OAR_PREDICTOR_MAX_BATCHES)
            return cli_usage_error("bench", "--batch", "at most %d sizes, got '%s'", OAR_PREDICTOR_MAX_BATCHES, v), -1;
        for (int k = 0; k < n; k++)
            if (b[k] == x) return cli_usage_error("bench", "--batch", "%lld twice in '%s'", x, v), -1;
        b[n++] = x;
        p += len;
        if (!*p) return n;
    }
}

/* Times p at one batch size: random inputs with their dynamic dims set to
 * it, warmup untimed runs, then iters timed; prints the figures. */
static int bench_batch(oar_predictor *p, const char *dir, long long batch, long long iters, long long warmup,
                       long long threads, double *lat) {
    int ni = oar_predictor_num_inputs(p), no = oar_predictor_num_outputs(p), rc = CLI_OK;
    if (ni > MAX_IO || no > MAX_IO) return cli_fail("bench", "the model has more than 64 inputs or outputs");
    oar_tensor *x[MAX_IO] = {0}, *y[MAX_IO] = {0};
    for (int i = 0; i < ni && !rc; i++) {
        int64_t shape[OAR_MAX_DIMS];
        oar_dtype dt;
        int nd = oar_predictor_input_shape(p, i, &dt, shape);
        for (int d = 0; d < nd; d++)
            if (shape[d] < 0) shape[d] = batch;
        oar_pool *pool = oar_pool_push();
        x[i] = oar_tensor_retain(oar_dtype_is_float(dt) ? oar_cast(oar_randn(OAR_F32, nd, shape), dt)
                                                        : oar_zeros(dt, nd, shape));
        oar_pool_pop(pool);
        if (!x[i]) rc = fail("bench");
    }
    for (long long r = 0; r < warmup + iters && !rc; r++) {
        double t0 = now();
        if (oar_predictor_run_borrowed(p, x, y)) rc = fail("bench");
        if (r >= warmup) lat[r - warmup] = now() - t0;
    }
    if (!rc) {
        double total = 0;
        for (long long r = 0; r < iters; r++) total += lat[r];
        qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
#define PCT(q) (1e3 * lat[(int)fmin((double)iters - 1, floor((q) * (double)iters))])
        printf("model: %s  batch %lld  iters %lld  threads %lld  %s\n", dir, batch, iters, threads,
               oar_predictor_is_compiled(p) ? "compiled" : "unfused");
        printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  max %.3f\n",
               1e3 * total / (double)iters, PCT(0.50), PCT(0.90), PCT(0.99), 1e3 * lat[0], 1e3 * lat[iters - 1]);
        printf("throughput: %.1f samples/s\n", (double)batch * (double)iters / total);
#undef PCT
    }
    for (int i = 0; i < MAX_IO; i++) oar_tensor_release(x[i]);
    return rc;
}

static int cmd_bench(int argc, char **argv) {
    if (wants_help(argc, argv, bench_help)) return CLI_OK;
    const char *dir = NULL, *v;
    long long iters = 100, warmup = 10, threads = 0;
    int64_t batches[OAR_PREDICTOR_MAX_BATCHES] = {1};
    int n_batches = 1;
    bool optimize = true, compile = true, opts = true;
    int m, rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && !strcmp(a, "--no-optimize")) optimize = false;
        else if (opts && !strcmp(a, "--no-compile")) compile = false;
        else if (opts && (m = opt_value("bench", argc, argv, &i, "--batch", NULL, "an integer >= 1", &v))) {
            if (m < 0 || (n_batches = parse_batches(v, batches)) < 0) return CLI_USAGE;
        } else if (opts && (m = opt_value("bench", argc, argv, &i, "--iters", NULL, "an integer >= 1", &v))) {
            if (m < 0 || parse_int("bench", "--iters", v, 1, INT_MAX / 2, &iters)) return CLI_USAGE;
        } else if (opts && (m = opt_value("bench", argc, argv, &i, "--warmup", NULL, "an integer >= 0", &v))) {
            if (m < 0 || parse_int("bench", "--warmup", v, 0, INT_MAX / 2, &warmup)) return CLI_USAGE;
        } else if (opts && (m = opt_value("bench", argc, argv, &i, "--threads", NULL, "an integer >= 0", &v))) {
            if (m < 0 || parse_int("bench", "--threads", v, 0, 4096, &threads)) return CLI_USAGE;
        } else if (opts && is_option(a)) return unknown_option("bench", a);
        else if (dir) return extra_argument("bench", a, "one MODEL");
        else dir = a;
    }
    if ((rc = check_model("bench", dir))) return rc;
    /* the convs are packed for the size (or each size) timed */
    oar_predictor_config cfg = {.model_dir = dir, .optimize = optimize, .num_threads = (int)threads,
                                .no_compile = !compile};
    if (n_batches == 1) cfg.batch = batches[0];
    else cfg.batches = batches, cfg.n_batches = n_batches;
    oar_predictor *p = load_predictor(dir, &cfg);
    if (!p) return fail("bench");
    double *lat = calloc((size_t)iters, sizeof *lat);
    if (!lat) rc = cli_fail("bench", "out of memory");
    for (int k = 0; k < n_batches && !rc; k++) rc = bench_batch(p, dir, batches[k], iters, warmup, threads, lat);
    free(lat);
    oar_predictor_free(p);
    return rc;
}

/* ---- devices, export ------------------------------------------------------------ */

/* Every device and plugin, and every plugin that failed to load with its reason. */
static int cmd_devices(int argc, char **argv) {
    if (wants_help(argc, argv, devices_help)) return CLI_OK;
    if (argc > 1) {
        if (is_option(argv[1])) return unknown_option("devices", argv[1]);
        return extra_argument("devices", argv[1], "no arguments");
    }
    int need = oar_device_report(NULL, 0);
    char *buf = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!buf) return fail("devices");
    oar_device_report(buf, (size_t)need + 1);
    fputs(buf, stdout);
    if (need > 0 && buf[need - 1] != '\n') putchar('\n');
    free(buf);
    return CLI_OK;
}

/* onnxexport branch: oar export MODEL out.onnx [--opset N] [--optimize]. MODEL
 * is a model folder (or an .onnx file); --optimize runs the inference passes
 * first. */
static int cmd_export(int argc, char **argv) {
    if (wants_help(argc, argv, export_help)) return CLI_OK;
    const char *dir = NULL, *out = NULL, *v;
    long long opset = 0;
    bool optimize = false, opts = true;
    int m, rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && !strcmp(a, "--optimize")) optimize = true;
        else if (opts && (m = opt_value("export", argc, argv, &i, "--opset", NULL, "an integer in 13..17", &v))) {
            if (m < 0) return CLI_USAGE;
            /* the range oar_onnx_export writes (src/onnx/onnx_export.c) */
            char *end;
            errno = 0;
            opset = strtoll(v, &end, 10);
            if (!*v || *end || errno) return cli_usage_error("export", "--opset", "expected an integer in 13..17, got '%s'", v);
            if (opset < 13 || opset > 17)
                return cli_usage_error("export", "--opset", "opset %lld is not supported; expected 13..17", opset);
        } else if (opts && is_option(a)) return unknown_option("export", a);
        else if (!dir) dir = a;
        else if (!out) out = a;
        else return extra_argument("export", a, "MODEL and OUT.onnx");
    }
    if ((rc = check_model("export", dir))) return rc;
    if (!out) return cli_usage_error("export", "OUT.onnx", "missing (the ONNX file to write)");
    if (!is_onnx(out)) return cli_usage_error("export", "OUT.onnx", "expected a file name ending .onnx, got '%s'", out);
    oar_graph *g = load_graph(dir);
    if (!g) return fail("export");
    int st = optimize ? oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) : 0;
    if (!st) st = oar_onnx_export(g, out, &(oar_onnx_export_options){.opset = (int)opset});
    if (!st) printf("wrote %s (opset %lld, %d oar nodes)\n", out, opset ? opset : 17, oar_graph_num_nodes(g));
    oar_graph_free(g);
    return st ? fail("export") : CLI_OK;
}

/* ---- plot ------------------------------------------------------------------------- */

#define MAX_METRICS 64

static int cmd_plot(int argc, char **argv) {
    if (wants_help(argc, argv, plot_help)) return CLI_OK;
    char **logs = calloc((size_t)argc, sizeof *logs), *metrics[MAX_METRICS];
    const char *out = NULL, *v;
    int n_logs = 0, n_metrics = 0, m, rc = CLI_OK;
    bool opts = true;
    if (!logs) return cli_fail("plot", "out of memory");
    for (int i = 1; i < argc && !rc; i++) {
        char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && (m = opt_value("plot", argc, argv, &i, "--output", "-o", "an .svg or .html file", &v))) {
            if (m < 0) rc = CLI_USAGE;
            else if (!cli_ends_with(v, ".svg") && !cli_ends_with(v, ".html") && !cli_ends_with(v, ".htm"))
                rc = cli_usage_error("plot", "-o", "expected an .svg or .html file, got '%s'", v);
            else out = v;
        } else if (opts && (m = opt_value("plot", argc, argv, &i, "--metric", NULL, "a metric's name", &v))) {
            if (m < 0) rc = CLI_USAGE;
            /* NAME or NAME,NAME: split in place (the value is in argv, which is ours) */
            for (char *s = (char *)v, *e; !rc && s; s = e ? e + 1 : NULL) {
                if ((e = strchr(s, ','))) *e = 0;
                if (!*s) rc = cli_usage_error("plot", "--metric", "expected a metric's name, got an empty one");
                else if (n_metrics == MAX_METRICS) rc = cli_usage_error("plot", "--metric", "more than %d", MAX_METRICS);
                else metrics[n_metrics++] = s;
            }
        } else if (opts && is_option(a)) rc = unknown_option("plot", a);
        else logs[n_logs++] = a;
    }
    if (!rc && !n_logs)
        rc = cli_usage_error("plot", "LOG", "missing (one or more JSON-lines logs written by oar_fit's log_path)");
    if (!rc && !out && isatty(STDOUT_FILENO))
        rc = cli_usage_error("plot", "-o", "missing, and the standard output is a terminal (give -o out.svg or "
                                           "out.html, or redirect the output)");
    if (!rc) rc = cli_plot(n_logs, logs, out, n_metrics, metrics);
    free(logs);
    return rc;
}

/* ---- quantize ------------------------------------------------------------------------ */

/* Whether v is one or more comma-separated names of .npy files. */
static bool calib_list_ok(const char *v) {
    char name[4096];
    for (const char *at = v;;) {
        size_t len = strcspn(at, ",");
        if (!len || len >= sizeof name) return false;
        snprintf(name, sizeof name, "%.*s", (int)len, at);
        if (!cli_ends_with(name, ".npy")) return false;
        if (!at[len]) return true;
        at += len + 1;
    }
}

static int cmd_quantize(int argc, char **argv) {
    if (wants_help(argc, argv, quantize_help)) return CLI_OK;
    const char *model = NULL, *out = NULL, *calib[MAX_IO], *v; /* calib: one comma-separated list per batch */
    int n_calib = 0, m;
    oar_calib_method method = OAR_CALIB_MINMAX;
    bool per_tensor = false, opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) opts = false;
        else if (opts && !strcmp(a, "--per-tensor")) per_tensor = true;
        else if (opts && (m = opt_value("quantize", argc, argv, &i, "--calib", NULL, "a .npy file", &v))) {
            if (m < 0) return CLI_USAGE;
            if (!calib_list_ok(v)) return cli_usage_error("quantize", "--calib", "expected .npy files (comma-separated, "
                                                            "one per model input), got '%s'", v);
            if (n_calib == MAX_IO) return cli_usage_error("quantize", "--calib", "more than %d", MAX_IO);
            calib[n_calib++] = v;
        } else if (opts && (m = opt_value("quantize", argc, argv, &i, "--method", NULL,
                                          "minmax, percentile or entropy", &v))) {
            if (m < 0) return CLI_USAGE;
            if (!strcmp(v, "minmax")) method = OAR_CALIB_MINMAX;
            else if (!strcmp(v, "percentile")) method = OAR_CALIB_PERCENTILE;
            else if (!strcmp(v, "entropy")) method = OAR_CALIB_ENTROPY;
            else return cli_usage_error("quantize", "--method", "expected minmax, percentile or entropy, got '%s'", v);
        } else if (opts && is_option(a)) return unknown_option("quantize", a);
        else if (!model) model = a;
        else if (!out) out = a;
        else return extra_argument("quantize", a, "MODEL and OUT");
    }
    int rc = check_model("quantize", model);
    if (rc) return rc;
    if (!out) return cli_usage_error("quantize", "OUT", "missing (the folder the quantized model is saved to)");
    if (!n_calib) return cli_usage_error("quantize", "--calib", "missing (one .npy file per calibration batch)");
    oar_graph *g = load_graph(model);
    if (!g) return fail("quantize");
    const int n_in = oar_graph_num_inputs(g);
    oar_tensor **batches = calloc((size_t)n_calib * (size_t)(n_in ? n_in : 1), sizeof *batches);
    if (!batches) {
        rc = cli_fail("quantize", "out of memory");
        goto done;
    }
    for (int b = 0; b < n_calib; b++) {
        char path[4096];
        const char *at = calib[b];
        int k = 0;
        for (; *at && k <= n_in; k++) { /* (one more than the model takes: the count is wrong) */
            size_t len = strcspn(at, ",");
            if (k < n_in) {
                snprintf(path, sizeof path, "%.*s", (int)len, at);
                if (!(batches[(size_t)b * (size_t)n_in + (size_t)k] = oar_npy_load(path))) {
                    rc = fail("quantize");
                    goto done;
                }
            }
            at += len + (at[len] == ',');
        }
        if (k != n_in) {
            rc = cli_usage_error("quantize", "--calib", "batch %d names %d file%s; the model takes %d input%s", b, k,
                                 k == 1 ? "" : "s", n_in, n_in == 1 ? "" : "s");
            goto done;
        }
    }
    oar_quantize_config cfg = {.n_batches = n_calib, .batches = batches, .method = method,
                               .per_tensor_weights = per_tensor};
    int n;
    if (oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0) < 0 || (n = oar_graph_quantize(g, &cfg)) < 0 ||
        oar_graph_save(g, out)) {
        rc = fail("quantize");
        goto done;
    }
    if (!n) cli_note("quantize", "no layer qualified (a matmul by a constant weight, or a conv2d); saved as it was");
    printf("%d layer%s quantized to int8 (%s, %s weights), calibrated on %d batch%s; saved to %s\n", n,
           n == 1 ? "" : "s", method == OAR_CALIB_MINMAX ? "min-max" : method == OAR_CALIB_PERCENTILE ? "percentile" : "entropy",
           per_tensor ? "per-tensor" : "per-channel", n_calib, n_calib == 1 ? "" : "es", out);
done:
    for (int b = 0; batches && b < n_calib * n_in; b++) oar_tensor_release(batches[b]);
    free(batches);
    oar_graph_free(g);
    return rc;
}

/* ---- main ---------------------------------------------------------------------------- */

/* `oar plan` (tools/plan.c): the automatic parallel strategy */
int cli_plan(int argc, char **argv);
extern const char cli_plan_help[];

static const command commands[] = {
    {"info", cmd_info, info_help},       {"run", cmd_run, run_help},          {"bench", cmd_bench, bench_help},
    {"graph", cmd_graph, graph_help},    {"export", cmd_export, export_help}, {"plot", cmd_plot, plot_help},
    {"devices", cmd_devices, devices_help},
    {"plan", cli_plan, cli_plan_help}, /* tools/plan.c */
    {"quantize", cmd_quantize, quantize_help},
};
#define N_COMMANDS (int)(sizeof commands / sizeof *commands)

static const command *find_command(const char *name) {
    for (int c = 0; c < N_COMMANDS; c++)
        if (!strcmp(commands[c].name, name)) return &commands[c];
    return NULL;
}

static int unknown_command(const char *name) {
    return cli_usage_error(NULL, name, "unknown %s; the commands are info, run, bench, graph, export, plot, devices, plan, quantize",
                           is_option(name) ? "option" : "command");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (is_help(name)) {
        fputs(usage_text, stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("oar %s\n", oar_version());
        return CLI_OK;
    }
    if (!strcmp(name, "help")) { /* oar help [COMMAND] */
        if (argc == 2) {
            fputs(usage_text, stdout);
            return CLI_OK;
        }
        const command *c = find_command(argv[2]);
        if (!c) return unknown_command(argv[2]);
        fputs(c->help, stdout);
        return CLI_OK;
    }
    const command *c = find_command(name);
    if (!c) return unknown_command(name);
    return c->run(argc - 1, argv + 1);
}

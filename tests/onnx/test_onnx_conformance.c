/* The ONNX backend node tests (Debian's libonnx-testdata: model.onnx and
 * test_data_set_N, input_K.pb and output_K.pb per test) run through the importer
 * and the predictor. One line per test: pass, fail (with the error) or
 * unsupported (with the op and opset). Fails if onnx/conformance_pass.txt
 * is missing or empty, if a test it lists no longer passes, or if a test
 * fails (imports and gives wrong values, unlike an unsupported one that is
 * refused cleanly) without being listed, with its reason, in
 * onnx/conformance_known_fail.txt. Prints newly passing tests and known
 * failures that now pass; skips (exit 77) when the test data is not
 * installed.
 *
 *     test_onnx_conformance [--write-pass] [--report FILE] [--only NAME] [DIR]
 *
 * Values are compared as ONNX's backend runner does by default:
 * |got - want| <= atol + rtol |want| with rtol 1e-3, atol 1e-7 (NaN equals
 * NaN); integers and bools exactly; dtypes and shapes must match.
 *
 * Inputs a node needs the value of at import (a Reshape's shape, Slice's
 * starts: oar graphs have static shapes) are graph inputs in these tests.
 * If the model does not import with every input symbolic, the harness
 * binds the non-float inputs as constants (oar_onnx_options), then all
 * inputs; such passes say "(bound: ints)" or "(bound: all)". */
#include "onnx/onnx_internal.h"
#include <dirent.h>
#include <math.h>
#include <oar/oar.h>
#include <oar/onnx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_DIR "/usr/share/libonnx-testdata/data/node"
#define PASS_LIST "onnx/conformance_pass.txt"
#define OPS_LIST "onnx/conformance_ops.txt"
#define KNOWN_FAIL_LIST "onnx/conformance_known_fail.txt"
#define RTOL 1e-3
#define ATOL 1e-7
#define MAX_IO 64

typedef struct {
    char **v;
    int n, cap;
} strlist;

static void push(strlist *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = strdup(s);
}
static bool has(const strlist *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], s)) return true;
    return false;
}
static void clear(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (strlist){0};
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The lines of path without comments (#) and blanks, or false when it
 * cannot be read. */
static bool read_lines(const char *path, strlist *l) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h) *h = 0;
        char *e = line + strlen(line);
        while (e > line && (e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\r' || e[-1] == '\t')) *--e = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s) push(l, s);
    }
    fclose(f);
    return true;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = len > 0 ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Loads dir/prefix_<i>.pb for i = 0.. into ts; the count, or -1 with msg. */
static int load_tensors(const char *dir, const char *prefix, oar_tensor **ts, char *msg, size_t size) {
    int n = 0;
    for (;; n++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s_%d.pb", dir, prefix, n);
        if (!exists(path)) break;
        if (n == MAX_IO) {
            snprintf(msg, size, "more than %d %s files", MAX_IO, prefix);
            return -1;
        }
        if (!(ts[n] = oar_onnx_tensor_load(path))) {
            snprintf(msg, size, "%s_%d.pb: %s", prefix, n, oar_last_error());
            for (int i = 0; i < n; i++) oar_tensor_release(ts[i]);
            return -1;
        }
    }
    return n;
}

/* 0 if got matches want, else a message. */
static int compare(int j, oar_tensor *got, oar_tensor *want, char *msg, size_t size) {
    oar_dtype dg = oar_tensor_dtype(got), dw = oar_tensor_dtype(want);
    if (dg != dw) {
        snprintf(msg, size, "output %d: dtype %s, expected %s", j, oar_dtype_name(dg), oar_dtype_name(dw));
        return 1;
    }
    int r = oar_tensor_ndim(got);
    bool same = r == oar_tensor_ndim(want);
    for (int d = 0; same && d < r; d++) same = oar_tensor_shape(got)[d] == oar_tensor_shape(want)[d];
    if (!same) {
        char a[200] = "", b[200] = "";
        for (int d = 0; d < r; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)oar_tensor_shape(got)[d]);
        for (int d = 0; d < oar_tensor_ndim(want); d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)oar_tensor_shape(want)[d]);
        snprintf(msg, size, "output %d: shape [%s], expected [%s]", j, a, b);
        return 1;
    }
    bool cplx = oar_dtype_is_complex(dg);
    oar_tensor *g64 = cplx ? oar_view_as_real(oar_contiguous(got)) : oar_cast(got, OAR_F64);
    oar_tensor *w64 = cplx ? oar_view_as_real(oar_contiguous(want)) : oar_cast(want, OAR_F64);
    if (cplx) {
        oar_tensor *a = oar_cast(g64, OAR_F64), *b = oar_cast(w64, OAR_F64);
        oar_tensor_release(g64);
        oar_tensor_release(w64);
        g64 = a;
        w64 = b;
    }
    oar_tensor *gc = oar_contiguous(g64), *wc = oar_contiguous(w64);
    int bad = 0;
    if (!gc || !wc) {
        snprintf(msg, size, "output %d: cannot read values: %s", j, oar_last_error());
        bad = 1;
    }
    int64_t n = bad ? 0 : oar_tensor_numel(gc);
    const double *a = bad ? NULL : oar_tensor_data(gc), *b = bad ? NULL : oar_tensor_data(wc);
    bool exact = !oar_dtype_is_float(dg) && !cplx;
    for (int64_t i = 0; i < n; i++) {
        bool ok = exact ? a[i] == b[i]
                        : (isnan(a[i]) && isnan(b[i])) || a[i] == b[i] || fabs(a[i] - b[i]) <= ATOL + RTOL * fabs(b[i]);
        if (!ok) {
            snprintf(msg, size, "output %d: element %lld is %.9g, expected %.9g", j, (long long)i, a[i], b[i]);
            bad = 1;
            break;
        }
    }
    oar_tensor_release(gc);
    oar_tensor_release(wc);
    oar_tensor_release(g64);
    oar_tensor_release(w64);
    return bad;
}

typedef enum { R_PASS, R_FAIL, R_UNSUPPORTED } result;

/* Imports with the inputs bound as `mode` says (0 none, 1 non-float, 2
 * all) and runs one data set. */
static oar_graph *import(const unsigned char *model, size_t n, int mode, int n_in, oar_tensor **in) {
    oar_tensor *vals[MAX_IO] = {0};
    for (int i = 0; i < n_in; i++)
        if (mode == 2 || (mode == 1 && !oar_dtype_is_float(oar_tensor_dtype(in[i])) &&
                          !oar_dtype_is_complex(oar_tensor_dtype(in[i]))))
            vals[i] = in[i];
    oar_onnx_options opt = {.n_values = n_in, .values = vals};
    return oar_onnx_load_buffer_with(model, n, mode ? &opt : NULL);
}

static bool is_unsupported(const char *msg) {
    return strstr(msg, "not supported") || strstr(msg, "not an oar dtype") || strstr(msg, "only ") ||
           strstr(msg, "is computed at run time") || strstr(msg, "refused") || strstr(msg, "supported)");
}

/* Runs one test directory; writes its line to line. */
static result run_test(const char *dir, const char *name, char *line, size_t size) {
    char path[1024], msg[768] = "";
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
    size_t n = 0;
    unsigned char *model = slurp(path, &n);
    if (!model) {
        snprintf(line, size, "fail %s: cannot read model.onnx", name);
        return R_FAIL;
    }
    int64_t opset = -1;
    char ops[256] = "?";
    oari_onnx_model_ops(model, n, &opset, ops, sizeof ops);
    result res = R_PASS;
    const char *how = "";
    int sets = 0;
    for (int s = 0; res == R_PASS; s++) {
        char sdir[1100];
        snprintf(sdir, sizeof sdir, "%s/%s/test_data_set_%d", dir, name, s);
        if (!exists(sdir)) break;
        sets++;
        oar_tensor *in[MAX_IO] = {0}, *want[MAX_IO] = {0}, *got[MAX_IO] = {0};
        int n_in = load_tensors(sdir, "input", in, msg, sizeof msg), n_out = 0;
        if (n_in < 0 || (n_out = load_tensors(sdir, "output", want, msg, sizeof msg)) < 0) {
            /* a sequence or optional file: the importer says what it lacks */
            oar_graph *g = oar_onnx_load_buffer(model, n);
            if (!g && is_unsupported(oar_last_error())) snprintf(msg, sizeof msg, "%s", oar_last_error());
            oar_graph_free(g);
            res = is_unsupported(msg) ? R_UNSUPPORTED : R_FAIL;
            if (n_in > 0)
                for (int i = 0; i < n_in; i++) oar_tensor_release(in[i]);
            break;
        }
        oar_graph *g = NULL;
        int mode = 0;
        char first[768] = "";
        for (; mode < 3 && !g; mode++) {
            oar_clear_error();
            g = import(model, n, mode, n_in, in);
            /* the first error, unless it asked for a value a later try bound */
            if (!g && (mode == 0 || strstr(first, "is computed at run time")))
                snprintf(first, sizeof first, "%s", oar_last_error());
            if (!g && n_in == 0) break;
        }
        mode--;
        if (!g) {
            snprintf(msg, sizeof msg, "%s", first);
            res = is_unsupported(msg) ? R_UNSUPPORTED : R_FAIL;
        } else {
            how = mode == 2 ? " (bound: all)" : mode == 1 ? " (bound: ints)" : how;
            oar_predictor *p = oar_predictor_from_graph(g, NULL);
            oar_graph_free(g);
            oar_tensor *feed[MAX_IO];
            int k = 0;
            for (int i = 0; i < n_in; i++) {
                bool bound = mode == 2 || (mode == 1 && !oar_dtype_is_float(oar_tensor_dtype(in[i])) &&
                                           !oar_dtype_is_complex(oar_tensor_dtype(in[i])));
                if (!bound) feed[k++] = in[i];
            }
            if (!p) {
                snprintf(msg, sizeof msg, "predictor: %s", oar_last_error());
                res = R_FAIL;
            } else if (oar_predictor_num_outputs(p) != n_out) {
                snprintf(msg, sizeof msg, "%d outputs, expected %d", oar_predictor_num_outputs(p), n_out);
                res = R_FAIL;
            } else if (oar_predictor_num_inputs(p) != k) {
                snprintf(msg, sizeof msg, "%d inputs, %d given", oar_predictor_num_inputs(p), k);
                res = R_FAIL;
            } else if (oar_predictor_run(p, feed, got)) {
                snprintf(msg, sizeof msg, "run: %s", oar_last_error());
                res = R_FAIL;
            } else {
                for (int j = 0; j < n_out && res == R_PASS; j++)
                    if (compare(j, got[j], want[j], msg, sizeof msg)) res = R_FAIL;
            }
            oar_predictor_free(p);
        }
        for (int i = 0; i < n_in; i++) oar_tensor_release(in[i]);
        for (int j = 0; j < n_out; j++) oar_tensor_release(want[j]), oar_tensor_release(got[j]);
    }
    free(model);
    if (res == R_PASS && sets == 0) {
        snprintf(msg, sizeof msg, "no test_data_set_*");
        res = R_FAIL;
    }
    if (res == R_PASS) snprintf(line, size, "pass %s%s", name, how);
    else if (res == R_FAIL) snprintf(line, size, "fail %s [%s, opset %lld]: %s", name, ops, (long long)opset, msg);
    else snprintf(line, size, "unsupported %s [%s, opset %lld]: %s", name, ops, (long long)opset, msg);
    return res;
}

/* True if every op of the model is in the subset list. */
static bool in_subset(const char *dir, const char *name, const strlist *subset) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
    size_t n = 0;
    unsigned char *model = slurp(path, &n);
    if (!model) return false;
    int64_t opset;
    char ops[4096];
    bool ok = oari_onnx_model_ops(model, n, &opset, ops, sizeof ops) == 0 && ops[0];
    free(model);
    for (char *t = strtok(ops, ","); t && ok; t = strtok(NULL, ",")) ok = has(subset, t);
    return ok;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash still shows the last test */
    const char *dir = getenv("OAR_ONNX_TESTDATA"), *report = NULL, *only = NULL;
    bool write = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--write-pass")) write = true;
        else if (!strcmp(argv[i], "--report") && i + 1 < argc) report = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else dir = argv[i];
    }
    if (!dir) dir = DEFAULT_DIR;
    DIR *d = opendir(dir);
    if (!d) {
        printf("skipped: no ONNX node tests at %s (install libonnx-testdata: scripts/deps.sh)\n", dir);
        return 77;
    }
    strlist tests = {0}, passing = {0}, failing = {0}, subset = {0}, listed = {0};
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "test_", 5) && (!only || !strcmp(e->d_name, only))) push(&tests, e->d_name);
    closedir(d);
    qsort(tests.v, (size_t)tests.n, sizeof *tests.v, cmp_str);
    strlist known_fail = {0};
    if (!read_lines(OPS_LIST, &subset) || !read_lines(KNOWN_FAIL_LIST, &known_fail)) {
        printf("cannot read %s or %s (run from tests/)\n", OPS_LIST, KNOWN_FAIL_LIST);
        return 1;
    }
    if ((!read_lines(PASS_LIST, &listed) || listed.n == 0) && !write) {
        printf("cannot read %s, or it lists no test: every test would count as new (run from tests/; "
               "--write-pass writes it)\n", PASS_LIST);
        return 1;
    }
    FILE *rf = report ? fopen(report, "w") : NULL;
    int n_pass = 0, n_fail = 0, n_unsup = 0, sub_n = 0, sub_pass = 0;
    clock_t t0 = clock();
    for (int i = 0; i < tests.n; i++) {
        char line[1200];
        result r = run_test(dir, tests.v[i], line, sizeof line); /* no pool: it owns and releases */
        printf("%s\n", line);
        if (rf) fprintf(rf, "%s\n", line);
        bool sub = in_subset(dir, tests.v[i], &subset);
        sub_n += sub;
        if (r == R_PASS) {
            n_pass++;
            sub_pass += sub;
            push(&passing, tests.v[i]);
        } else {
            n_fail += r == R_FAIL;
            n_unsup += r == R_UNSUPPORTED;
            if (r == R_FAIL) push(&failing, tests.v[i]);
        }
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("summary: %d of %d pass (%d fail, %d unsupported); the CNN/transformer subset (%s): %d of %d pass; "
           "%.2f s CPU\n", n_pass, tests.n, n_fail, n_unsup, OPS_LIST, sub_pass, sub_n, secs);
    if (rf) fprintf(rf, "summary: %d of %d pass; subset %d of %d\n", n_pass, tests.n, sub_pass, sub_n);
    if (rf) fclose(rf);
    int lost = 0, gained = 0, new_failures = 0;
    for (int i = 0; i < failing.n; i++)
        if (!has(&known_fail, failing.v[i])) {
            printf("NEW FAILURE: %s gives wrong values (not in %s)\n", failing.v[i], KNOWN_FAIL_LIST);
            new_failures++;
        }
    for (int i = 0; i < known_fail.n; i++)
        if (has(&passing, known_fail.v[i]))
            printf("known failure now passes: %s (remove it from %s)\n", known_fail.v[i], KNOWN_FAIL_LIST);
    for (int i = 0; i < listed.n; i++)
        if (!has(&passing, listed.v[i]) && (!only || !strcmp(listed.v[i], only))) {
            printf("REGRESSION: %s is in %s but does not pass\n", listed.v[i], PASS_LIST);
            lost++;
        }
    for (int i = 0; i < passing.n; i++)
        if (!has(&listed, passing.v[i])) {
            printf("new pass: %s\n", passing.v[i]);
            gained++;
        }
    if (gained && !write) printf("%d tests pass that %s does not list: run with --write-pass to add them\n", gained, PASS_LIST);
    if (write && !only) {
        FILE *f = fopen(PASS_LIST, "w");
        if (!f) {
            printf("cannot write %s\n", PASS_LIST);
            return 1;
        }
        fprintf(f, "# ONNX node tests that pass (tests/onnx/test_onnx_conformance.c --write-pass)\n");
        for (int i = 0; i < passing.n; i++) fprintf(f, "%s\n", passing.v[i]);
        fclose(f);
        printf("wrote %s (%d tests)\n", PASS_LIST, passing.n);
    }
    clear(&tests);
    clear(&passing);
    clear(&failing);
    clear(&subset);
    clear(&listed);
    clear(&known_fail);
    return lost || new_failures ? 1 : 0;
}

/* docs/ops.md is generated from the op registry: each op's CPU kernel
 * dtypes, whether it has a gradient rule, and whether gradcheck_cases.h
 * checks it to second order. A normal run checks that the committed file
 * matches; `test_ops_doc --write [path]` rewrites it (path defaults to
 * ../docs/ops.md, as tests run from tests/). */
#include "gradcheck_cases.h"

#include "backends/cpu/cpu.h"

typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) OARI_PRINTF(2, 3);
static void put(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static const char *short_name(int d) {
    static const char *const names[OAR_DTYPE_COUNT] = {"bool", "u8", "i32", "i64", "f16", "bf16",
                                                       "f32", "f64", "c64", "c128", "i8"};
    return names[d];
}

/* The CPU kernels oneDNN gives where oar is built with it (OAR_WITH_DNNL;
 * src/backends/cpu/cpu_dnnl.c) and oneDNN has bf16 kernels on the CPU,
 * computed in f32 otherwise: marked the same in either build and on any
 * CPU, so that one ops.md is right for all. */
static bool dnnl_kernel(oari_op op, int d) { return d == OAR_BF16 && oari_cpu_bf16_is_dnnl(op); }

static void dtypes(buf *b, oari_op op, const oari_op_def *def) {
    if (def->flags & OARI_F_VIEW) {
        put(b, "any (view)");
        return;
    }
    oar_device *cpu = oar_device_cpu();
    bool f32 = oari_kernel_lookup(cpu, op, OAR_F32) != NULL, first = true;
    for (int d = 0; d < OAR_DTYPE_COUNT; d++) {
        bool k = oari_kernel_lookup(cpu, op, (oar_dtype)d) != NULL;
        bool via = !k && f32 && (d == OAR_F16 || d == OAR_BF16) && !(def->flags & OARI_F_NO_HALF);
        if (!k && !via) continue;
        const char *mark = dnnl_kernel(op, d) ? "\\*\\*" : via ? "\\*" : "";
        put(b, "%s%s%s", first ? "" : " ", short_name(d), mark);
        first = false;
    }
    if (first) put(b, "none");
}

static char *generate(void) {
    buf b = {0};
    int n_def = 0, n_diff = 0, n_second = 0;
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const oari_op_def *d = oari_op_defs[op];
        bool second;
        if (!d) continue;
        n_def++;
        if (d->grad) n_diff++;
        if (d->grad && op_case_count(d->name, &second) && second) n_second++;
    }
    put(&b, "# Ops\n\n");
    put(&b, "Generated from the op registry by `tests/autograd/test_ops_doc.c`; do not edit.\n"
            "Regenerate with `build/test_ops_doc --write ../docs/ops.md` run from `tests/`\n"
            "(the test fails while this file is out of date).\n\n");
    put(&b, "%d primitive ops, %d defined, %d with a gradient rule, %d checked against central\n"
            "differences to second order (`tests/autograd/gradcheck_cases.h`).\n\n",
        OARI_OP_COUNT, n_def, n_diff, n_second);
    put(&b, "- **CPU dtypes**: dtypes with a CPU kernel; \\* computed in f32 and stored back;\n"
            "  \\*\\* oneDNN's kernel where oar is built with it (`OAR_WITH_DNNL`) and oneDNN has\n"
            "  bf16 kernels on the CPU (AVX-512 for oneDNN 2.6), else as \\*.\n"
            "- **gradient**: yes (a rule written with ops), no (not differentiable), graphs\n"
            "  (decomposed: no rule; a graph backward differentiates the op written as other ops,\n"
            "  `oari_op_def.decompose`), or missing.\n"
            "- **checked**: the gradcheck table's cases for the op (first and second order,\n"
            "  contiguous and strided inputs); for a decomposed op, a graph's second order\n"
            "  against eager's.\n\n");
    put(&b, "| op | CPU dtypes | gradient | second order checked |\n");
    put(&b, "| --- | --- | --- | --- |\n");
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const oari_op_def *d = oari_op_defs[op];
        const char *name = oari_op_name((oari_op)op);
        put(&b, "| %s | ", name);
        if (!d) {
            put(&b, "not implemented | - | - |\n");
            continue;
        }
        dtypes(&b, (oari_op)op, d);
        bool second = false;
        int cases = op_case_count(name, &second);
        const char *grad = d->grad ? "yes" : d->decompose ? "graphs (decomposed)"
                                           : (d->flags & OARI_F_NONDIFF) ? "no" : "missing";
        const char *chk = d->decompose && !d->grad ? "graph against eager"
                          : !d->grad ? "-" : !cases ? "no" : second ? "yes" : "first order only";
        put(&b, " | %s | %s |\n", grad, chk);
    }
    return b.s;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    test_current = "ops_doc";
    const char *path = "../docs/ops.md";
    bool write = argc > 1 && !strcmp(argv[1], "--write");
    if (write && argc > 2) path = argv[2];
    char *doc = generate();
    if (write) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        CHECK(f != NULL);
        if (f) {
            fputs(doc, f);
            CHECK(fclose(f) == 0 && rename(tmp, path) == 0);
            printf("wrote %s\n", path);
        }
    } else {
        char *old = read_file(path);
        CHECK(old != NULL);
        bool same = old && !strcmp(old, doc);
        if (!same)
            fprintf(stderr, "%s is out of date with the op registry; regenerate it with "
                    "`test_ops_doc --write %s` (run from tests/)\n", path, path);
        CHECK(same);
        free(old);
    }
    /* every defined op appears in the table */
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        char row[64];
        snprintf(row, sizeof row, "| %s |", oari_op_name((oari_op)op));
        CHECK(strstr(doc, row) != NULL);
    }
    free(doc);
    return test_summary();
}

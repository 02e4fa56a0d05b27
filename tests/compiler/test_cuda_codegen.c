/* The CUDA C renderer (src/compiler/codegen_cu.c) without a GPU: NVRTC
 * compiles source without one, so every kernel the renderer writes for the
 * random graphs of the fuzzer (tests/compiler/fuzz_graphs.h), an MLP train
 * step, the row ops and every row of the elementwise table is compiled to
 * PTX here, and each fused kernel's
 * entry is found in it under its own name; the launches themselves run only
 * on a GPU (scripts/gpu-check.sh). Skipped (77) where the build found no
 * NVRTC. */
#include "test.h"

#include "compiler/ew_graphs.h"
#include "compiler/fuzz_graphs.h"

#include "compiler/compiler.h"

#ifdef OAR_TEST_NVRTC
#include <nvrtc.h>

/* Compiles src with NVRTC; true when it builds and the PTX holds an entry
 * for each of f's kernels. Prints the log otherwise. */
static bool compiles(const oari_fusion *f, const char *what) {
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, oari_sbuf_str(&f->source), "oar_fused.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return false;
    const char *opts[] = {"--gpu-architecture=compute_80", "--std=c++17"};
    nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
    bool ok = r == NVRTC_SUCCESS;
    size_t n = 0;
    if (!ok && nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1) {
        char *log = malloc(n);
        if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) /* OAR_DEBUG=1: the source too */
            fprintf(stderr, "%s: NVRTC: %s\n%s\n%s%s\n", what, nvrtcGetErrorString(r), log,
                    getenv("OAR_DEBUG") ? "--- source ---\n" : "", getenv("OAR_DEBUG") ? oari_sbuf_str(&f->source) : "");
        free(log);
    }
    if (ok && nvrtcGetPTXSize(prog, &n) == NVRTC_SUCCESS) {
        char *ptx = malloc(n);
        ok = ptx && nvrtcGetPTX(prog, ptx) == NVRTC_SUCCESS;
        for (int k = 0; ok && k < f->n_kernels; k++) {
            char entry[64];
            snprintf(entry, sizeof entry, ".entry %s(", f->kernels[f->kernels[k].code].name); /* shared code */
            if (!strstr(ptx, entry)) {
                fprintf(stderr, "%s: no %s in the PTX\n", what, entry);
                ok = false;
            }
        }
        free(ptx);
    }
    nvrtcDestroyProgram(&prog);
    return ok;
}

/* g's grouping rendered as CUDA C: as many launches as rendered as C, and
 * it compiles. */
static bool check_graph(const oar_graph *g, const char *what, int *kernels) {
    oari_fusion *cu = NULL, *c = NULL;
    bool ok = oari_fuse_graph(g, &oari_render_cu, &cu) == 0 && oari_fuse_graph(g, &oari_render_c, &c) == 0;
    ok = ok && cu->n_launches == c->n_launches && cu->n_kernels == c->n_kernels;
    if (ok) *kernels += cu->n_kernels;
    ok = ok && (cu->n_kernels == 0 || compiles(cu, what));
    oari_fusion_free(cu);
    oari_fusion_free(c);
    return ok;
}

static void test_random_graphs(void) {
    int graphs = 0, bad = 0, kernels = 0;
    for (uint64_t seed = 1; seed <= 5; seed++) { /* SUBGRAPHS chains each */
        oar_pool *p = oar_pool_push();
        oar_manual_seed(seed);
        fuzz_case fc;
        oar_graph_input_spec specs[2 * SUBGRAPHS];
        oar_graph *g = trace_case(seed, &fc, specs);
        CHECK(g != NULL);
        if (g) {
            oar_graph_optimize(g, OAR_PASSES_INFERENCE, 0);
            char what[32];
            snprintf(what, sizeof what, "fuzz seed %llu", (unsigned long long)seed);
            bad += !check_graph(g, what, &kernels);
            graphs += SUBGRAPHS;
        }
        oar_graph_free(g);
        oar_pool_pop(p);
    }
    fprintf(stderr, "%d random subgraphs rendered as CUDA C (%d kernels), %d traces failed to compile\n", graphs,
            kernels, bad);
    CHECK(graphs == 5 * SUBGRAPHS && kernels > 0);
    CHECK(bad == 0);
}

static int mlp_loss(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_cross_entropy(oar_module_forward(ctx, in[0]), in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

/* The MLP's forward, backward and SGD update as one graph (softmax rows,
 * bias-gradient column sums, the updates) with a dynamic batch. */
static void test_mlp_step(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(1);
    oar_module *m = oar_sequential_new(3, (oar_module *[]){oar_linear_new(12, 16, true), oar_gelu_new(false),
                                                         oar_linear_new(16, 5, true)});
    oar_tensor *params[8];
    int np = oar_module_parameters(m, params, 8);
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_F32, .ndim = 2, .shape = {-1, 12}, .dim_names = {"N"}},
                                     {.name = "t", .dtype = OAR_I64, .ndim = 1, .shape = {-1}, .dim_names = {"N"}}};
    oar_graph *g = oar_trace(mlp_loss, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    int wrt[8], kernels = 0;
    for (int k = 0; k < np; k++) wrt[k] = 2 + k;
    CHECK(g && oar_graph_append_backward(g, 0, np, wrt) == 1 && oar_graph_append_sgd(g, 0.1) == np);
    CHECK(g && oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) == 0);
    CHECK(g && check_graph(g, "MLP step", &kernels));
    CHECK(kernels >= 4);
    oar_graph_free(g);
    oar_module_free(m);
    oar_pool_pop(p);
}

/* Every row of the elementwise table, in each dtype of its gen column (and
 * gelu's tanh form), fused with its reader: one kernel per row, and the
 * CUDA C (the row's formula over ew_math.h's words) compiles. */
static void test_every_row(void) {
    oar_pool *outer = oar_pool_push(); /* the graphs' inputs */
    int rows = 0, kernels = 0;
    for (size_t t = 0; t < sizeof ew_gen_dtypes / sizeof *ew_gen_dtypes; t++)
        for (int alt = 0; alt < 2; alt++) {
            ew_graph eg;
            for (int cursor = 0; ew_graph_next(&eg, ew_gen_dtypes[t], alt, &cursor);) {
                oar_pool *p = oar_pool_push();
                oar_graph *g = ew_graph_trace(&eg);
                char what[64];
                snprintf(what, sizeof what, "table rows, %s%s", oar_dtype_name(ew_gen_dtypes[t]), alt ? " alt" : "");
                int k = 0;
                CHECK(g && check_graph(g, what, &k));
                CHECK(k == eg.n_rows);
                rows += eg.n_rows;
                kernels += k;
                oar_graph_free(g);
                ew_graph_free(&eg);
                oar_pool_pop(p);
            }
        }
    fprintf(stderr, "%d table rows rendered as CUDA C (%d kernels)\n", rows, kernels);
    CHECK(rows > 60);
    oar_pool_pop(outer);
}

/* A graph the renderer cannot compile is caught by NVRTC, not hidden: a
 * fusion whose source is broken on purpose fails with the log printed. */
static void test_broken_source_fails(void) {
    oar_pool *p = oar_pool_push();
    fuzz_case fc;
    oar_graph_input_spec specs[2 * SUBGRAPHS];
    oar_graph *g = trace_case(1, &fc, specs);
    oari_fusion *cu = NULL;
    CHECK(g && oari_fuse_graph(g, &oari_render_cu, &cu) == 0 && cu->n_kernels > 0);
    if (cu) {
        oari_sbuf_puts(&cu->source, "this is not CUDA C;\n");
        fprintf(stderr, "(the NVRTC error below is expected)\n");
        CHECK(!compiles(cu, "broken on purpose"));
    }
    oari_fusion_free(cu);
    oar_graph_free(g);
    oar_pool_pop(p);
}

int main(void) {
    RUN(test_random_graphs);
    RUN(test_mlp_step);
    RUN(test_every_row);
    RUN(test_broken_source_fails);
    return test_summary();
}
#else
int main(void) {
    fprintf(stderr, "test_cuda_codegen: skipped, this build found no NVRTC (the CUDA toolkit)\n");
    return 77;
}
#endif

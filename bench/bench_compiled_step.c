/* The character transformer's train step three ways, in one run: eager
 * (forward, oar_backward, SGD), the static step run unfused, and the static
 * step compiled (src/compiler/). Model as examples/char_lm.c: embeddings,
 * 4 pre-norm causal encoder layers (d 128, 4 heads, feed-forward 512,
 * GELU), final LayerNorm, vocab head; batch 16 x 64, cross entropy, SGD.
 * "oar step_ms" is the compiled step; bench/peer/compiled_step.py times
 * PyTorch eager and, with PyTorch 2, torch.compile (Inductor) on the same
 * model. BENCH_PROFILE=1 also prints the compiled step's profile by kernel;
 * BENCH_KERNELS=1 compares every compiled kernel with its nodes run unfused
 * (the "no fused kernel more than 5% slower"). */
#include <oar/oar.h>
#include <oar/nn.h>
#include <oar/optim.h>
#include <oar/profiler.h>

#include "exec/exec.h" /* per-kernel timing (BENCH_KERNELS) */

#include "bench_median.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Each figure is the median over WINDOWS windows of STEPS steps (and the
 * best window on a comment line), as bench/peer/compiled_step.py measures
 * PyTorch: on these shared machines two threads run at one thread's speed
 * for seconds at a time, in any program, so one window can land in such a
 * stretch. */
enum { D = 128, T = 64, VOCAB = 73, BATCH = 16, STEPS = 10, WINDOWS = 5 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_tensor *lm_forward(oar_module *m, oar_tensor *idx) {
    oar_tensor *x = oar_add(oar_module_forward(oar_module_child(m, "tok"), idx),
                            oar_module_forward(oar_module_child(m, "pos"), oar_arange(0, T, 1, OAR_I64)));
    x = oar_module_forward(oar_module_child(m, "layers"), x);
    x = oar_module_forward(oar_module_child(m, "norm"), x);
    return oar_module_forward(oar_module_child(m, "head"), x);
}

static oar_module *transformer(void) {
    oar_module *m = oar_module_new("CharLM", lm_forward, NULL, NULL);
    oar_module *layers = oar_sequential_new(0, NULL);
    for (int i = 0; i < 4; i++)
        oar_sequential_append(layers, oar_transformer_encoder_layer_new(D, 4, &(oar_transformer_options){
            .dim_feedforward = 512, .activation = OAR_ACTIVATION_GELU, .norm_first = true, .causal = true}));
    int64_t d = D;
    oar_module_add_child(m, "tok", oar_embedding_new(VOCAB, D));
    oar_module_add_child(m, "pos", oar_embedding_new(T, D));
    oar_module_add_child(m, "layers", layers);
    oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true));
    oar_module_add_child(m, "head", oar_linear_new(D, VOCAB, true));
    return m;
}

static int loss_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *logits = oar_reshape(oar_module_forward(ctx, in[0]), 2, (int64_t[]){-1, VOCAB});
    out[0] = oar_cross_entropy(logits, in[1], NULL, -100, 0.0, OAR_REDUCTION_MEAN);
    return out[0] ? 0 : -1;
}

static int die(const char *what) {
    fprintf(stderr, "bench_compiled_step: %s: %s\n", what, oar_last_error());
    exit(1);
}

/* ms per static step (the parameters updated in place: the executors are
 * set up with oar_executor_update_in_place) */
static double static_steps(oar_executor *ex, oar_tensor **in, oar_tensor **params, int np) {
    (void)params, (void)np;
    oar_tensor *out[256];
    double t0 = 0;
    for (int s = 0; s < 2 + STEPS; s++) {
        if (s == 2) t0 = now();
        if (oar_executor_run(ex, in, out)) die("static step");
    }
    return (now() - t0) * 1e3 / STEPS;
}

int main(void) {
    const double lr = 0.01;
    oar_manual_seed(0);
    oar_module *m = transformer();
    oar_tensor *params[128];
    int np = oar_module_parameters(m, params, 128);
    oar_tensor *x = oar_randint(0, VOCAB, OAR_I64, 2, (int64_t[]){BATCH, T});
    oar_tensor *y = oar_randint(0, VOCAB, OAR_I64, 1, (int64_t[]){BATCH * T});
    oar_optimizer *opt = oar_sgd_new(np, params, &(oar_sgd_options){.lr = lr});
    /* eager: two warm-up steps, then the windows */
    double eager_w[WINDOWS], t0 = 0;
    for (int s = 0; s < 2 + WINDOWS * STEPS; s++) {
        if (s >= 2 && (s - 2) % STEPS == 0) t0 = now();
        oar_pool *p = oar_pool_push();
        oar_optim_zero_grad(opt);
        oar_tensor *loss = NULL;
        if (loss_fn(m, (oar_tensor *[]){x, y}, &loss) || oar_backward(loss, NULL) || oar_optim_step(opt))
            die("eager step");
        oar_pool_pop(p);
        if (s >= 2 && (s - 1) % STEPS == 0) eager_w[(s - 2) / STEPS] = (now() - t0) * 1e3 / STEPS;
    }
    double eager_ms = bench_median(eager_w, WINDOWS);
    /* static: traced once, run unfused and compiled */
    oar_graph_input_spec specs[2] = {{.name = "x", .dtype = OAR_I64, .ndim = 2, .shape = {BATCH, T}},
                                     {.name = "y", .dtype = OAR_I64, .ndim = 1, .shape = {BATCH * T}}};
    oar_graph *g = oar_trace(loss_fn, m, 2, specs, 1, &(oar_trace_options){.module = m, .params_as_inputs = true});
    int wrt[128];
    for (int k = 0; k < np; k++) wrt[k] = 2 + k;
    if (!g || oar_graph_append_backward(g, 0, np, wrt) < 0 || oar_graph_append_sgd(g, lr) < 0 ||
        oar_graph_optimize(g, OAR_PASSES_TRAINING, 0))
        die("tracing");
    oar_executor *plain = oar_executor_new(g), *fused = oar_executor_new(g);
    double c0 = now();
    if (oar_executor_compile(fused) || !oar_executor_is_compiled(fused)) die("compile");
    double compile_ms = (now() - c0) * 1e3;
    if (oar_executor_update_in_place(plain) != np || oar_executor_update_in_place(fused) != np) die("donation");
    oar_tensor *in[130] = {x, y};
    for (int k = 0; k < np; k++) in[2 + k] = params[k];
    double unfused_w[WINDOWS], fused_w[WINDOWS];
    for (int r = 0; r < WINDOWS; r++) { /* alternate: both see the same machine */
        unfused_w[r] = static_steps(plain, in, params, np);
        fused_w[r] = static_steps(fused, in, params, np);
    }
    double unfused_ms = bench_median(unfused_w, WINDOWS), fused_ms = bench_median(fused_w, WINDOWS);
    if (getenv("BENCH_KERNELS")) { /* each kernel against the sum of its nodes, unfused */
        int dp = 0, df = 0;
        for (int j = 0; j < oar_graph_num_outputs(g); j++) {
            dp += oar_executor_donated_in_place(plain, j) == 1;
            df += oar_executor_donated_in_place(fused, j) == 1;
        }
        printf("donated in place: %d unfused, %d compiled\n", dp, df);
        int nn = oar_graph_num_nodes(g);
        double *tf = calloc((size_t)nn, sizeof *tf), *tu = calloc((size_t)nn, sizeof *tu);
        oari_executor_time_nodes(fused, tf);
        oari_executor_time_nodes(plain, tu);
        for (int r = 0; r < 3; r++) { /* alternate: both see the same machine */
            static_steps(plain, in, params, np);
            static_steps(fused, in, params, np);
        }
        oari_executor_time_nodes(fused, NULL);
        oari_executor_time_nodes(plain, NULL);
        const oari_fusion *f = oari_executor_fusion(fused);
        int slower = 0;
        double sum_f = 0, sum_u = 0, worst = 0;
        for (int k = 0; k < f->n_kernels; k++) {
            double a = tf[f->kernels[k].root], b = 0;
            for (int i = 0; i < nn; i++)
                if (f->kernel_of[i] == k) b += tu[i];
            sum_f += a;
            sum_u += b;
            if (a > 1.05 * b) slower++;
            if (b > 0 && a / b > worst) worst = a / b;
            if (getenv("BENCH_KERNELS")[0] == '2')
                printf("kernel %s: %d nodes, root %s, %.1f us compiled, %.1f us unfused\n", f->kernels[k].name,
                       f->kernels[k].n_members, oari_op_name(g->nodes[f->kernels[k].root].op),
                       a / 1e3 / (3 * (2 + STEPS)), b / 1e3 / (3 * (2 + STEPS)));
            if (getenv("BENCH_KERNELS")[0] == '2') { /* its members and the root's shape */
                printf("    ops:");
                for (int i = 0; i < nn; i++)
                    if (f->kernel_of[i] == k) printf(" %s", oari_op_name(g->nodes[i].op));
                const oari_gvalue *v = &g->values[g->nodes[f->kernels[k].root].out[0]];
                printf("; out [");
                for (int d = 0; d < v->ndim; d++) printf(d ? " %lld" : "%lld", (long long)v->shape[d]);
                printf("]\n");
            }
        }
        printf("kernels: %d compiled, %d more than 5%% slower than their nodes unfused (worst %.2fx); all "
               "kernels together %.2f ms compiled vs %.2f ms unfused per step\n", f->n_kernels, slower, worst,
               sum_f / 1e6 / (3 * (2 + STEPS)), sum_u / 1e6 / (3 * (2 + STEPS)));
        free(tf);
        free(tu);
    }
    if (getenv("BENCH_PROFILE")) { /* where the compiled step's time goes, by kernel */
        oar_profiler_start();
        static_steps(fused, in, params, np);
        oar_profiler_stop();
        oar_profiler_summary_write(stderr);
    }
    printf("oar step_ms %.3f ms\n", fused_ms);
    printf("oar eager_step_ms %.3f ms\n", eager_ms);
    printf("oar static_unfused_step_ms %.3f ms\n", unfused_ms);
    printf("# best of %d windows of %d steps: compiled %.3f, eager %.3f, unfused %.3f ms\n", WINDOWS, STEPS,
           fused_w[0], eager_w[0], unfused_w[0]);
    printf("speedup compiled vs eager = %.2f, vs unfused static = %.2f (%d nodes, %d launches compiled; "
           "compile %.0f ms)\n", eager_ms / fused_ms, unfused_ms / fused_ms, oar_graph_num_nodes(g),
           oar_executor_num_kernels(fused), compile_ms);
    oar_executor_free(plain);
    oar_executor_free(fused);
    oar_graph_free(g);
    oar_optim_free(opt);
    oar_module_free(m);
    return 0;
}

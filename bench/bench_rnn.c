/* An LSTM layer's forward + backward (torch.nn.LSTM(128, 128), seq_len 32,
 * batch 32, loss sum of the outputs, gradients of the weights and input),
 * one OpenMP thread as the peer (bench/peer/rnn.py):
 *   oar fused     the module (oar_lstm_new): one lstm_layer_train op, whose
 *                 kernel does one GEMM per step and a fused gate pass and
 *                 keeps the gates, and whose first-order backward is one
 *                 lstm_layer_backward op (a gate pass and a GEMM per step)
 *                 and three GEMMs; the forward alone (no grad) is lstm_layer;
 *   oar unrolled  the same cell written step by step with public ops (what
 *                 src/nn/rnn.c did before the fused op), here for the
 *                 speed-up.
 *   oar graph     the module's loss traced (oar_trace, parameters as
 *                 inputs), oar_graph_append_backward (which makes the
 *                 lstm_layer an lstm_layer_train, its rule the ops over the
 *                 reserve), run by the executor; torch's figure for it is
 *                 its eager one (bench/peer/rnn.py: torch has no graph form
 *                 of this backward).
 * Then the forward alone (no grad) of each, and a GRU layer's forward +
 * backward through its module (oar_gru_new, which runs gru_layer_train and
 * the rule's ops over its reserve; torch.nn.GRU). Best of rounds. */
#include <oar/oar.h>

#include <omp.h>
#include <stdio.h>
#include <time.h>

enum { T = 32, B = 32, I = 128, H = 128 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int loss_fn(void *m, oar_tensor *const *in, oar_tensor **out) {
    out[0] = oar_sum(oar_module_forward(m, in[0]), 0, NULL, false);
    return out[0] ? 0 : -1;
}

/* The traced step (see the head): best ms of rounds, or a negative value. */
static double graph_step(oar_module *m, oar_tensor *x) {
    oar_tensor *params[4];
    if (oar_module_parameters(m, params, 4) != 4) return -1;
    oar_graph_input_spec spec = {.name = "x", .dtype = OAR_F32, .ndim = 3, .shape = {T, B, I}};
    oar_graph *g = oar_trace(loss_fn, m, 1, &spec, 1,
                             &(oar_trace_options){.module = m, .params_as_inputs = true});
    oar_executor *ex = NULL;
    if (!g || oar_graph_append_backward(g, 0, 5, (int[]){0, 1, 2, 3, 4}) < 0 ||
        oar_graph_optimize(g, OAR_PASSES_TRAINING, 0) || !(ex = oar_executor_new(g))) {
        oar_graph_free(g);
        return -1;
    }
    oar_tensor *in[5] = {x, params[0], params[1], params[2], params[3]}, *out[6];
    double best = 1e30;
    for (int r = 0; r <= 5; r++) {
        double t0 = now();
        for (int k = 0; k < 5; k++) {
            oar_pool *p = oar_pool_push();
            if (oar_executor_run(ex, in, out)) best = -1e30;
            oar_pool_pop(p);
        }
        double ms = (now() - t0) * 1e3 / 5;
        if (r > 0 && ms < best) best = ms;
    }
    oar_executor_free(ex);
    oar_graph_free(g);
    return best;
}

/* The LSTM unrolled with public ops: gates i, f, g, o. */
static oar_tensor *unrolled(oar_tensor *x, oar_tensor *const *w) {
    oar_tensor *h = oar_zeros(OAR_F32, 2, (int64_t[]){B, H}), *c = h, *ys[T];
    oar_tensor *xw = oar_add(oar_matmul(x, oar_transpose(w[0], 0, 1)), w[2]);
    oar_tensor *wt = oar_transpose(w[1], 0, 1);
    for (int t = 0; t < T; t++) {
        oar_tensor *a = oar_add(oar_add(oar_squeeze(oar_slice(xw, 0, t, t + 1, 1), 0),
                                        oar_matmul(h, wt)), w[3]);
        oar_tensor *g[4];
        if (oar_chunk(a, 4, 1, 4, g) != 4) return NULL;
        c = oar_add(oar_mul(oar_sigmoid(g[1]), c), oar_mul(oar_sigmoid(g[0]), oar_tanh(g[2])));
        ys[t] = h = oar_mul(oar_sigmoid(g[3]), oar_tanh(c));
    }
    return oar_stack(T, ys, 0);
}

int main(void) {
    omp_set_num_threads(1);
    oar_manual_seed(0);
    oar_module *m = oar_lstm_new(I, H, NULL);
    const char *pn[4] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"};
    oar_tensor *w[4];
    for (int k = 0; k < 4; k++) w[k] = oar_module_get(m, pn[k]);
    oar_tensor *x = oar_tensor_retain(oar_randn(OAR_F32, 3, (int64_t[]){T, B, I}));
    oar_tensor_set_requires_grad(x, true);
    const char *names[4] = {"lstm_fwd_bwd_fused", "lstm_fwd_bwd_unrolled", "lstm_fwd_fused",
                            "lstm_fwd_unrolled"};
    for (int run = 0; run < 4; run++) {
        int mode = run & 1;
        bool fwd_only = run >= 2;
        double best = 1e30;
        const int rounds = 5, n = 5;
        for (int r = 0; r <= rounds; r++) {
            double t0 = now();
            for (int k = 0; k < n; k++) {
                oar_pool *p = oar_pool_push();
                if (fwd_only) oar_no_grad_push();
                oar_tensor *y = mode ? unrolled(x, w) : oar_module_forward(m, x);
                oar_tensor *loss = oar_sum(y, 0, NULL, false), *g[5];
                oar_tensor *wrt[5] = {w[0], w[1], w[2], w[3], x};
                if (!loss || (!fwd_only && oar_grad(1, &loss, NULL, 5, wrt, false, false, g))) {
                    fprintf(stderr, "bench_rnn: %s\n", oar_last_error());
                    return 1;
                }
                if (fwd_only) oar_no_grad_pop();
                oar_pool_pop(p);
            }
            double ms = (now() - t0) * 1e3 / n;
            if (r > 0 && ms < best) best = ms;
        }
        printf("oar %s %.3f ms\n", names[run], best);
    }
    double gms = graph_step(m, x);
    if (gms < 0) {
        fprintf(stderr, "bench_rnn: graph: %s\n", oar_last_error());
        return 1;
    }
    printf("oar lstm_fwd_bwd_graph %.3f ms\n", gms);
    /* the GRU module, forward + backward */
    oar_module *gm = oar_gru_new(I, H, NULL);
    oar_tensor *gw[5];
    for (int k = 0; k < 4; k++) gw[k] = oar_module_get(gm, pn[k]);
    gw[4] = x;
    double best = 1e30;
    for (int r = 0; r <= 5; r++) {
        double t0 = now();
        for (int k = 0; k < 5; k++) {
            oar_pool *p = oar_pool_push();
            oar_tensor *loss = oar_sum(oar_module_forward(gm, x), 0, NULL, false), *g[5];
            if (!loss || oar_grad(1, &loss, NULL, 5, gw, false, false, g)) {
                fprintf(stderr, "bench_rnn: %s\n", oar_last_error());
                return 1;
            }
            oar_pool_pop(p);
        }
        double ms = (now() - t0) * 1e3 / 5;
        if (r > 0 && ms < best) best = ms;
    }
    printf("oar gru_fwd_bwd %.3f ms\n", best);
    oar_module_free(gm);
    oar_tensor_release(x);
    oar_module_free(m);
    return 0;
}

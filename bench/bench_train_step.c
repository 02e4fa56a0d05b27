/* Training steps of two models built from oar's modules: LeNet-5 (batch
 * 64, 1x28x28 inputs, SGD with momentum) and the character Transformer of
 * examples/char_lm.c (4 pre-norm layers, d 128, 4 heads, feed-forward 512,
 * context 64, vocabulary 73, batch 8, AdamW). Prints the time per step
 * and the peak resident set size (getrusage ru_maxrss) of a process that
 * ran only that model. Peer: bench/peer/train_step.py.
 *
 *     bench_train_step              both models, each in a child process
 *     bench_train_step lenet5       one model in this process
 *     bench_train_step transformer */
#include <oar/oar.h>
#include <oar/nn.h>
#include <oar/optim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static oar_module *lenet5(void) {
    return oar_sequential_new(
        12,
        (oar_module *[]){
            oar_conv2d_new(1, 6, 5, 1, 2, 1, 1, true), oar_relu_new(), oar_max_pool2d_new(2, 2, 0),
            oar_conv2d_new(6, 16, 5, 1, 0, 1, 1, true), oar_relu_new(), oar_max_pool2d_new(2, 2, 0),
            oar_flatten_new(1, -1), oar_linear_new(400, 120, true), oar_relu_new(),
            oar_linear_new(120, 84, true), oar_relu_new(), oar_linear_new(84, 10, true)});
}

enum { D = 128, T = 64, VOCAB = 73 };

static oar_tensor *lm_forward(oar_module *m, oar_tensor *idx) {
    oar_tensor *pos = oar_arange(0, T, 1, OAR_I64);
    oar_tensor *x = oar_add(oar_module_forward(oar_module_child(m, "tok"), idx),
                            oar_module_forward(oar_module_child(m, "pos"), pos));
    x = oar_module_forward(oar_module_child(m, "layers"), x);
    x = oar_module_forward(oar_module_child(m, "norm"), x);
    return oar_module_forward(oar_module_child(m, "head"), x);
}

static oar_module *transformer(void) {
    oar_module *m = oar_module_new("CharLM", lm_forward, NULL, NULL);
    oar_module *layers = oar_sequential_new(0, NULL);
    for (int i = 0; i < 4; i++)
        oar_sequential_append(layers,
                              oar_transformer_encoder_layer_new(
                                  D, 4,
                                  &(oar_transformer_options){.dim_feedforward = 512,
                                                             .activation = OAR_ACTIVATION_GELU,
                                                             .norm_first = true,
                                                             .causal = true}));
    int64_t d = D;
    if (!m || oar_module_add_child(m, "tok", oar_embedding_new(VOCAB, D)) ||
        oar_module_add_child(m, "pos", oar_embedding_new(T, D)) ||
        oar_module_add_child(m, "layers", layers) ||
        oar_module_add_child(m, "norm", oar_layer_norm_new(1, &d, 1e-5, true)) ||
        oar_module_add_child(m, "head", oar_linear_new(D, VOCAB, true))) {
        oar_module_free(m);
        return NULL;
    }
    return m;
}

static int run_model(const char *name) {
    bool lm = !strcmp(name, "transformer");
    if (!lm && strcmp(name, "lenet5")) {
        fprintf(stderr, "bench_train_step: unknown model %s (lenet5 or transformer)\n", name);
        return 2;
    }
    oar_manual_seed(0);
    oar_module *m = lm ? transformer() : lenet5();
    oar_tensor *params[128];
    int np = oar_module_parameters(m, params, 128);
    oar_optimizer *opt =
        lm ? oar_adamw_new(np, params, &(oar_adam_options){.lr = 1e-3, .weight_decay = 0.01})
           : oar_sgd_new(np, params, &(oar_sgd_options){.lr = 0.01, .momentum = 0.9});
    if (!m || !opt) {
        fprintf(stderr, "bench_train_step: %s\n", oar_last_error());
        return 1;
    }
    oar_tensor *x, *y;
    if (lm) {
        x = oar_randint(0, VOCAB, OAR_I64, 2, (int64_t[]){8, T});
        y = oar_randint(0, VOCAB, OAR_I64, 1, (int64_t[]){8 * T});
    } else {
        x = oar_randn(OAR_F32, 4, (int64_t[]){64, 1, 28, 28});
        y = oar_randint(0, 10, OAR_I64, 1, (int64_t[]){64});
    }
    const int warm = 3, steps = lm ? 20 : 50;
    double t0 = 0;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) t0 = now();
        oar_pool *p = oar_pool_push();
        oar_tensor *out = oar_module_forward(m, x);
        if (lm) out = oar_reshape(out, 2, (int64_t[]){-1, VOCAB});
        oar_tensor *loss = oar_cross_entropy(out, y, NULL, -100, 0.0, OAR_REDUCTION_MEAN);
        if (!loss || oar_backward(loss, NULL) || oar_optim_step(opt)) {
            fprintf(stderr, "bench_train_step: step failed: %s\n", oar_last_error());
            return 1;
        }
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
    }
    double ms = (now() - t0) * 1e3 / steps;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("oar %s_step %.3f ms\n", name, ms);
    printf("oar %s_peak_rss %.1f MB\n", name, (double)ru.ru_maxrss / 1024.0);
    oar_tensor_release(x);
    oar_tensor_release(y);
    oar_optim_free(opt);
    oar_module_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) return run_model(argv[1]);
    /* each model in a fresh process, so its peak RSS is its own */
    const char *models[2] = {"lenet5", "transformer"};
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], models[i], (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            rc = 1;
    }
    return rc;
}

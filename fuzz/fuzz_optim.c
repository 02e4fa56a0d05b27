/* libFuzzer harness for optimizer state files (oar_optim_load,
 * src/optim/optim_state.c, over the safetensors reader): every input is a
 * file loaded into an SGD (momentum), an Adam and an RMSprop optimizer
 * over the same two parameters. A load that fails must say why and leave
 * the optimizer as it was (its step count); one that succeeds must leave
 * an optimizer that steps.
 *
 *     ./build-fuzz/fuzz_optim -max_total_time=300 build-fuzz/corpus/fuzz_optim fuzz/corpus/fuzz_optim */
#include "fuzz_util.h"

#include <oar/autograd.h>
#include <oar/optim.h>

static oar_tensor *params[2];
static oar_optimizer *opts[3];

static void setup(void) {
    if (opts[0]) return;
    params[0] = oar_zeros(OAR_F32, 2, (int64_t[]){3, 2});
    params[1] = oar_zeros(OAR_F64, 1, (int64_t[]){2});
    for (int i = 0; i < 2; i++) {
        oar_tensor_retain(params[i]); /* kept for the process (out of every pool) */
        oar_tensor_set_requires_grad(params[i], true);
    }
    opts[0] = oar_sgd_new(2, params, &(oar_sgd_options){.lr = 0.1, .momentum = 0.9});
    opts[1] = oar_adam_new(2, params, &(oar_adam_options){.lr = 0.01});
    opts[2] = oar_rmsprop_new(2, params, &(oar_rmsprop_options){.lr = 0.01, .momentum = 0.5, .centered = true});
}

static int fuzz_one(const uint8_t *data, size_t size) {
    setup();
    const char *path = fuzz_file(data, size);
    for (int k = 0; k < 3; k++) {
        oar_clear_error();
        int64_t before = oar_optim_steps(opts[k]);
        int st = oar_optim_load(opts[k], path);
        fuzz_note("fuzz_optim", st == 0);
        if (st != 0) {
            fuzz_check(oar_last_error()[0] != 0, "fuzz_optim", "a failed load left no message");
            fuzz_check(oar_optim_steps(opts[k]) == before, "fuzz_optim", "a failed load changed the optimizer");
            continue;
        }
        oar_pool *pool = oar_pool_push();
        oar_tensor *loss = oar_add(oar_sum(params[0], 0, NULL, false), oar_sum(params[1], 0, NULL, false));
        fuzz_check(loss && oar_backward(loss, NULL) == 0, "fuzz_optim", "backward failed");
        oar_clear_error();
        if (oar_optim_step(opts[k]) != 0) fuzz_check(oar_last_error()[0] != 0, "fuzz_optim", "a failed step left no message");
        oar_pool_pop(pool);
    }
    return 0;
}

FUZZ_TARGET(fuzz_one)

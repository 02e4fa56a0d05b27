/* End to end against PyTorch (tests/ref/gen_train.py): a 4-5-3 tanh MLP
 * written as a user-defined module with f64 parameters, cross entropy,
 * oar_backward, six Adam steps inside pools. The loss curve and the final
 * weights must match torch's; the checkpoint of the trained model reloads
 * into a fresh one and gives the same loss. */
#include "test.h"

#include <oar/io.h>
#include <oar/nn.h>
#include <oar/optim.h>
#include <unistd.h>

#include "ref/train_ref.h"

static oar_tensor *linear(oar_module *m, oar_tensor *x) {
    return oar_add(oar_matmul(x, oar_transpose(oar_module_get(m, "weight"), 0, 1)),
                   oar_module_get(m, "bias"));
}

/* Temporaries and the result belong to the caller's pool. */
static oar_tensor *mlp_forward(oar_module *m, oar_tensor *x) {
    oar_tensor *h = oar_tanh(linear(oar_module_child(m, "fc1"), x));
    return linear(oar_module_child(m, "fc2"), h);
}

static oar_module *layer(const double *w, const double *b, int64_t out, int64_t in) {
    oar_module *m = oar_module_new("MyLinear", NULL, NULL, NULL);
    int64_t ws[2] = {out, in};
    oar_tensor *wt = oar_tensor_from_data(w, OAR_F64, 2, ws);
    oar_tensor *bt = oar_tensor_from_data(b, OAR_F64, 1, &out);
    oar_module_add_parameter(m, "weight", wt);
    oar_module_add_parameter(m, "bias", bt);
    return m;
}

static oar_module *make_mlp(void) {
    oar_pool *p = oar_pool_push();
    oar_module *m = oar_module_new("MLP", mlp_forward, NULL, NULL);
    oar_module_add_child(m, "fc1", layer(train_mlp_fc1_weight, train_mlp_fc1_bias, 5, 4));
    oar_module_add_child(m, "fc2", layer(train_mlp_fc2_weight, train_mlp_fc2_bias, 3, 5));
    oar_pool_pop(p);
    return m;
}

static double loss_of(oar_module *m, oar_tensor *x, oar_tensor *y, oar_tensor **loss_out) {
    oar_tensor *loss =
        oar_cross_entropy(oar_module_forward(m, x), y, NULL, -100, 0, OAR_REDUCTION_MEAN);
    if (loss_out) *loss_out = loss;
    return loss ? oar_tensor_item(loss) : NAN;
}

static void test_mlp_adam(void) {
    oar_pool *outer = oar_pool_push();
    int64_t xs[2] = {6, 4}, six = 6;
    int64_t labels[6];
    for (int i = 0; i < 6; i++)
        labels[i] = (int64_t)train_mlp_y[i];
    oar_tensor *x = oar_tensor_from_data(train_mlp_x, OAR_F64, 2, xs);
    oar_tensor *y = oar_tensor_from_data(labels, OAR_I64, 1, &six);
    oar_module *m = make_mlp();
    oar_tensor *ps[4];
    CHECK(oar_module_parameters(m, ps, 4) == 4);
    oar_optimizer *opt = oar_adam_new(4, ps, &(oar_adam_options){.lr = 0.05});
    for (int step = 0; step < 6; step++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *loss;
        double l = loss_of(m, x, y, &loss);
        CHECK_NEAR(l, train_mlp_losses[step], 1e-12);
        CHECK(oar_backward(loss, NULL) == 0);
        CHECK(oar_tensor_grad(ps[0]) != NULL);
        CHECK(oar_optim_step(opt) == 0);
        oar_optim_zero_grad(opt);
        oar_pool_pop(p);
    }
    CHECK_VALUES(oar_module_get(m, "fc1.weight"), train_mlp_fc1_weight_final, 20, 1e-12);

    /* checkpoint round trip */
    char path[] = "/tmp/oar_e2e_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(oar_module_save(m, path) == 0);
    oar_module *fresh = make_mlp();
    CHECK(oar_module_load(fresh, path) == 0);
    oar_pool *p = oar_pool_push();
    oar_no_grad_push();
    CHECK_NEAR(loss_of(fresh, x, y, NULL), loss_of(m, x, y, NULL), 0);
    oar_no_grad_pop();
    oar_pool_pop(p);
    remove(path);
    oar_module_free(fresh);
    oar_optim_free(opt);
    oar_module_free(m);
    oar_pool_pop(outer);
}

int main(void) {
    RUN(test_mlp_adam);
    return test_summary();
}

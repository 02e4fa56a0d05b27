/* The program shown in README.md, built and run by `make test`. */
#include <oar/oar.h>
#include <stdio.h>

int main(void) {
    oar_manual_seed(0);
    oar_pool *pool = oar_pool_push();             /* frees every temporary on pop */
    int64_t shape[2] = {4, 3};
    oar_tensor *w = oar_randn(OAR_F64, 2, shape);
    oar_tensor_set_requires_grad(w, true);
    oar_tensor *x = oar_linspace(-1, 1, 4, OAR_F64);
    oar_tensor *y = oar_tanh(oar_matmul(x, w));   /* [3] */
    oar_tensor *loss = oar_sum(oar_square(y), 0, NULL, false);
    if (!loss || oar_backward(loss, NULL)) {      /* a NULL anywhere in the chain ends here */
        fprintf(stderr, "oar: %s\n", oar_last_error());
        return 1;
    }
    printf("loss %.6f\n", oar_tensor_item(loss));
    oar_tensor_print(oar_tensor_grad(w), "dloss/dw");
    oar_pool_pop(pool);
    return 0;
}

/* The outside program of tests/install/install_test.sh, built against an
 * installed oar. With no argument: f(x) = x^3 + 2x at x = 3 and its first
 * and second derivatives through autograd (33, 29, 18). --devices: the
 * device report (plugins found next to the installed liboar). --dist:
 * oar_dist_init through the installed MPI module, as a single process. */
#include <oar/oar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void) {
    fprintf(stderr, "oar: %s\n", oar_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--devices")) {
        char report[8192];
        if (oar_device_report(report, sizeof report) < 0) return fail();
        fputs(report, stdout);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--dist")) {
        if (oar_dist_init(&argc, &argv)) return fail();
        printf("rank %d of %d\n", oar_dist_rank(), oar_dist_world_size());
        return oar_dist_finalize() ? fail() : 0;
    }
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_scalar_of(3.0, OAR_F64);
    if (oar_tensor_set_requires_grad(x, true)) return fail();
    oar_tensor *f = oar_add(oar_mul(oar_mul(x, x), x), oar_mul_scalar(x, 2.0));
    oar_tensor *d1 = NULL, *d2 = NULL;
    if (!f || oar_grad(1, &f, NULL, 1, &x, true, false, &d1) || oar_grad(1, &d1, NULL, 1, &x, false, false, &d2))
        return fail();
    printf("f %g df %g d2f %g\n", oar_tensor_item(f), oar_tensor_item(d1), oar_tensor_item(d2));
    oar_pool_pop(pool);
    return 0;
}

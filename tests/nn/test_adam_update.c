/* The fused Adam/AdamW update (the adam_update op, src/ops/optim_update.c,
 * its CPU kernel src/backends/cpu/cpu_optim.c, and oar_optim_step's use of
 * it): five steps of each mode (no weight decay, L2, decoupled) against a
 * float64 loop of torch's formulas, in f64, f32 (contiguous and over a
 * transposed gradient, the iterator's strided path) and bf16 (computed in
 * f32 between casts); the op called directly on strided inputs; and its
 * shape rule's refusals. test_zero checks that it gives the composite
 * update's bits (ZeRO's shards take this op, data parallel's dtensors the
 * composite); test_optim checks the same optimizers against PyTorch's
 * trajectories; test_opencl_train runs the composite update that a device
 * without this kernel takes. */
#include "test.h"

#include "core/core.h" /* to plant gradients, strided ones too, without a backward pass */
#include "ops/op.h"

#include <stdint.h>

enum { STEPS = 5, ROWS = 7, COLS = 33 }; /* 231 values: vector loops and a tail */

typedef struct {
    double lr, beta1, beta2, eps, wd;
    bool decoupled;
} hyper;

/* torch.optim.Adam / AdamW (single tensor), `steps` steps on p with the
 * gradient of step s test_hash_value(10 + s, i), in float64. */
static void reference(const hyper *h, int steps, int64_t n, double *p) {
    double *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
    for (int s = 1; s <= steps && m && v; s++) {
        double bc1 = 1 - pow(h->beta1, s), bc2 = 1 - pow(h->beta2, s);
        for (int64_t i = 0; i < n; i++) {
            double g = test_hash_value(10 + s, i);
            if (h->decoupled)
                p[i] *= 1 - h->lr * h->wd;
            else
                g += h->wd * p[i];
            m[i] = h->beta1 * m[i] + (1 - h->beta1) * g;
            v[i] = h->beta2 * v[i] + (1 - h->beta2) * g * g;
            p[i] -= h->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + h->eps);
        }
    }
    free(m);
    free(v);
}

/* The optimizer on a [ROWS, COLS] parameter of dtype dt, gradients set by
 * hand (transposed views when `strided`), against the reference: max
 * relative error of p after STEPS steps. */
static double optimizer_error(const hyper *h, oar_dtype dt, bool strided) {
    oar_pool *pool = oar_pool_push();
    const int64_t n = ROWS * COLS;
    double *want = malloc((size_t)n * sizeof *want), *buf = malloc((size_t)n * sizeof *buf),
           err = INFINITY;
    oar_tensor *p = NULL;
    if (!want || !buf) goto done;
    for (int64_t i = 0; i < n; i++)
        want[i] = test_hash_value(1, i);
    p = oar_tensor_retain(
        oar_cast(oar_tensor_from_data(want, OAR_F64, 2, (int64_t[]){ROWS, COLS}), dt));
    if (dt != OAR_F64) { /* the reference starts from the rounded values */
        double *r = test_values(p);
        if (r) memcpy(want, r, (size_t)n * sizeof *want);
        free(r);
    }
    reference(h, STEPS, n, want);
    oar_tensor_set_requires_grad(p, true);
    oar_adam_options o = {
        .lr = h->lr, .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps, .weight_decay = h->wd};
    oar_optimizer *opt = h->decoupled ? oar_adamw_new(1, &p, &o) : oar_adam_new(1, &p, &o);
    CHECK(opt != NULL);
    for (int s = 1; s <= STEPS && opt; s++) {
        oar_pool *sp = oar_pool_push();
        oar_tensor *g;
        if (strided) { /* the transpose of a [COLS, ROWS] array holding g^T */
            for (int64_t r = 0; r < ROWS; r++)
                for (int64_t c = 0; c < COLS; c++)
                    buf[c * ROWS + r] = test_hash_value(10 + s, r * COLS + c);
            g = oar_transpose(
                oar_cast(oar_tensor_from_data(buf, OAR_F64, 2, (int64_t[]){COLS, ROWS}), dt), 0, 1);
        } else {
            for (int64_t i = 0; i < n; i++)
                buf[i] = test_hash_value(10 + s, i);
            g = oar_cast(oar_tensor_from_data(buf, OAR_F64, 2, (int64_t[]){ROWS, COLS}), dt);
        }
        oar_tensor_zero_grad(p);
        CHECK(g && (!strided || !oar_tensor_is_contiguous(g)));
        p->grad = oar_tensor_retain(g);
        CHECK(oar_optim_step(opt) == 0);
        oar_pool_pop(sp);
    }
    double *got = test_values(p);
    err = got ? 0 : INFINITY;
    for (int64_t i = 0; got && i < n; i++) {
        double e = fabs(got[i] - want[i]) / (1e-3 + fabs(want[i]));
        if (!(e <= err)) err = e;
    }
    free(got);
    oar_optim_free(opt);
done:
    oar_tensor_release(p);
    free(want);
    free(buf);
    oar_pool_pop(pool);
    return err;
}

static void test_against_reference(void) {
    static const hyper modes[] = {
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
        {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .wd = 0.1},
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .wd = 0.05, .decoupled = true},
    };
    for (int k = 0; k < 3; k++) {
        const hyper *h = &modes[k];
        double e64 = optimizer_error(h, OAR_F64, false), e32 = optimizer_error(h, OAR_F32, false);
        double e32s = optimizer_error(h, OAR_F32, true), e16 = optimizer_error(h, OAR_BF16, false);
        if (!(e64 <= 1e-12 && e32 <= 2e-5 && e32s <= 2e-5 && e16 <= 0.05))
            fprintf(stderr, "  mode %d: f64 %g, f32 %g, f32 strided %g, bf16 %g\n", k, e64, e32,
                    e32s, e16);
        CHECK(e64 <= 1e-12);
        CHECK(e32 <= 2e-5);
        CHECK(e32s <= 2e-5);
        CHECK(e16 <= 0.05); /* bf16's own rounding of p, m and v each step */
    }
}

/* The op itself on strided inputs: p a transposed view, m a column slice. */
static void test_op_strided(void) {
    oar_pool *pool = oar_pool_push();
    const int64_t R = 9, C = 20;
    double pv[9 * 20], gv[9 * 20], mv[9 * 40], vv[9 * 20];
    for (int64_t i = 0; i < R * C; i++)
        pv[i] = test_hash_value(2, i), gv[i] = test_hash_value(3, i),
        vv[i] = 0.1 + test_hash_value(5, i) * test_hash_value(5, i);
    for (int64_t i = 0; i < R * 2 * C; i++)
        mv[i] = test_hash_value(4, i);
    /* p [R, C] as the transpose of a [C, R] array; m every other column of [R, 2C] */
    oar_tensor *pt = oar_tensor_from_data(pv, OAR_F64, 2, (int64_t[]){C, R});
    oar_tensor *p = oar_transpose(pt, 0, 1);
    oar_tensor *g = oar_tensor_from_data(gv, OAR_F64, 2, (int64_t[]){R, C});
    oar_tensor *m =
        oar_slice(oar_tensor_from_data(mv, OAR_F64, 2, (int64_t[]){R, 2 * C}), 1, 0, 2 * C, 2);
    oar_tensor *v = oar_tensor_from_data(vv, OAR_F64, 2, (int64_t[]){R, C});
    const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, bc1 = 0.19, bc2 = 0.0199;
    oar_tensor *in[4] = {p, g, m, v}, *out[3] = {NULL, NULL, NULL};
    oari_attrs a = {.nf = 7, .f = {lr, b1, b2, eps, wd, bc1, bc2}, .ni = 1, .i = {0}};
    CHECK(oari_dispatch(OARI_OP_adam_update, 4, in, &a, out) == 0);
    double *op = out[0] ? test_values(out[0]) : NULL, *om = out[1] ? test_values(out[1]) : NULL;
    double *ov = out[2] ? test_values(out[2]) : NULL, worst = op && om && ov ? 0 : INFINITY;
    for (int64_t r = 0; r < R && op && om && ov; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            double pp = pv[c * R + r], gg = gv[i] + wd * pp, mm = mv[r * 2 * C + 2 * c],
                   vvv = vv[i];
            mm += (1 - b1) * (gg - mm);
            vvv += (1 - b2) * (gg * gg - vvv);
            pp -= lr / bc1 * mm / (sqrt(vvv) / sqrt(bc2) + eps);
            double e = fmax(fabs(op[i] - pp), fmax(fabs(om[i] - mm), fabs(ov[i] - vvv)));
            if (!(e <= worst)) worst = e;
        }
    CHECK(worst <= 1e-13);
    free(op), free(om), free(ov);
    for (int j = 0; j < 3; j++)
        oar_tensor_release(out[j]);
    oar_pool_pop(pool);
}

static int call(oar_tensor *p, oar_tensor *g, oar_tensor *m, oar_tensor *v, const oari_attrs *a) {
    oar_tensor *in[4] = {p, g, m, v}, *out[3] = {NULL, NULL, NULL};
    int st = oari_dispatch(OARI_OP_adam_update, 4, in, a, out);
    for (int j = 0; j < 3; j++)
        oar_tensor_release(out[j]);
    return st;
}

static void test_refusals(void) {
    oar_pool *pool = oar_pool_push();
    int64_t s[2] = {3, 4}, s2[2] = {4, 3};
    oar_tensor *p = oar_zeros(OAR_F32, 2, s), *other = oar_zeros(OAR_F32, 2, s2);
    oar_tensor *p64 = oar_zeros(OAR_F64, 2, s), *pc = oar_zeros(OAR_C64, 2, s),
               *pi = oar_zeros(OAR_I32, 2, s);
    oari_attrs ok = {.nf = 7, .f = {1e-3, 0.9, 0.999, 1e-8, 0, 0.1, 0.001}, .ni = 1, .i = {1}};
    CHECK(call(p, p, p, p, &ok) == 0);
    CHECK(call(p, p64, p, p, &ok) == 0); /* an f64 gradient is cast to the parameter's f32 */
    CHECK_STATUS_FAILS(call(pc, pc, pc, pc, &ok),
                       "the parameter must be a real float tensor, got complex64");
    CHECK_STATUS_FAILS(call(p, pi, p, p, &ok),
                       "the gradient must be a real float tensor, got int32");
    CHECK_STATUS_FAILS(call(p, other, p, p, &ok),
                       "the gradient has shape [4, 3], the parameter [3, 4]");
    CHECK_STATUS_FAILS(call(p, p, p, other, &ok), "the second moment has shape [4, 3]");
    CHECK_STATUS_FAILS(call(p, p, p64, p, &ok),
                       "the first moment is float64, the parameter float32");
    oari_attrs few = ok;
    few.nf = 4;
    CHECK_STATUS_FAILS(call(p, p, p, p, &few), "wants 7 float attributes and 1 integer");
    oari_attrs mode = ok;
    mode.i[0] = 2;
    CHECK_STATUS_FAILS(call(p, p, p, p, &mode), "wants 7 float attributes and 1 integer (0 or 1)");
    static const struct {
        int at;
        double v;
    } bad[] = {{0, -1}, {1, 1.0}, {2, -0.5}, {3, -1e-8}, {4, NAN}, {5, 0}, {6, 1.5}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        oari_attrs b = ok;
        b.f[bad[k].at] = bad[k].v;
        CHECK_STATUS_FAILS(call(p, p, p, p, &b), "adam_update: invalid attributes");
    }
    oar_pool_pop(pool);
}

int main(void) {
    RUN(test_against_reference);
    RUN(test_op_strided);
    RUN(test_refusals);
    return test_summary();
}

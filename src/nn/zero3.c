/* ZeRO stage 3's forward (oar_zero_forward, include/oar/dist.h): a unit's
 * module run between an all-gather of its parameters and their free, and
 * one custom autograd node standing for it, whose backward gathers them
 * again, recomputes the module with grad on (the same random numbers),
 * differentiates it, hands the parameters' gradients to the shard
 * (reduce-scatter, src/optim/zero.c) and frees the parameters. So between
 * units only the shards and the activations the caller keeps are alive:
 * nothing of the module's inside is saved (as oar_checkpoint), and the
 * parameters' .grad stays unset. It lives in nn because it runs modules;
 * the shards and collectives are optim's and dist's, below. */
#include "../autograd/node.h"
#include "../dist/dist.h"
#include "../optim/zero.h"

#include <oar/autograd.h>
#include <oar/nn.h>

/* The node's context. */
typedef struct z3 {
    oar_zero *z;           /* borrowed: must outlive the backward */
    int u;
    oar_module *m;         /* borrowed */
    oar_tensor *x;         /* the input, detached (retained) */
    uint64_t seed, offset; /* the generator when the forward began */
} z3;

/* t without its gradient path; a dtensor stays one (oar_detach of a
 * dtensor keeps only its global meta), over a detached local. */
static oar_tensor *detach_any(oar_tensor *t) {
    const oari_dist_attr *a = oari_dist(t);
    if (!a) return oar_detach(t);
    return oar_dtensor_from_local(oar_detach(a->local), a->mesh, a->p, t->shape);
}

static void z3_release(void *ctx) {
    z3 *c = ctx;
    oar_tensor_release(c->x);
    oari_obj_free(c, sizeof *c);
}

/* gin[0]: x's gradient (if needed); gin[1] (the anchor): none. */
static int z3_backward(struct oari_node *n, bool create_graph, oar_tensor *const *gout, const bool *needs,
                       oar_tensor **gin) {
    z3 *c = n->custom_ctx;
    if (create_graph)
        return oari_error(OAR_ERR_UNSUPPORTED, "oar_zero_forward: create_graph (a gradient to be differentiated "
                          "again) through a ZeRO-3 unit is not supported");
    if (!gout[0]) return 0;
    oar_tensor *const *params;
    int np = oari_zero_unit_params(c->z, c->u, &params), ni = 0;
    size_t bytes = 2 * ((size_t)np + 1) * sizeof(oar_tensor *);
    oar_tensor **inps = oari_obj_calloc(bytes);
    if (!inps) return oari_fail_status();
    oar_tensor **res = inps + np + 1, *gx = NULL;
    int st = 0;
    oar_pool *p = oar_pool_push();
    oar_tensor *x = detach_any(c->x);
    if (!x || (needs[0] && oar_tensor_set_requires_grad(x, true))) st = oari_fail_status();
    oar_tensor *y = NULL;
    if (!st && !(st = oari_zero_unit_gather(c->z, c->u))) {
        uint64_t seed, offset;
        oari_rng_get(&seed, &offset);
        oari_rng_set(c->seed, c->offset);
        int depth = oari_grad_mode_set_depth(0);
        y = oar_module_forward(c->m, x);
        oari_grad_mode_set_depth(depth);
        oari_rng_set(seed, offset);
        if (!y) st = oari_fail_status();
        if (needs[0]) inps[ni++] = x;
        for (int i = 0; i < np; i++) inps[ni++] = params[i];
        if (!st) st = oar_grad_ex(1, &y, gout, ni, inps, OAR_GRAD_ALLOW_UNUSED, res);
        if (!st) st = oari_zero_unit_reduce(c->z, c->u, res + (needs[0] ? 1 : 0));
        int rs = oari_zero_unit_release(c->z, c->u);
        if (!st) st = rs;
        if (!st && needs[0]) gx = oar_tensor_retain(res[0]); /* outlives p */
    }
    oar_pool_pop(p);
    oari_obj_free(inps, bytes);
    if (gx && !(gin[0] = oari_pool_adopt(gx))) st = oari_fail_status();
    return st;
}

static const oari_node_fn z3_node_fn = {.name = "zero3_unit", .backward = z3_backward, .release = z3_release};

oar_tensor *oar_zero_forward(oar_zero *z, oar_module *m, oar_tensor *x) {
    const char *what = "oar_zero_forward";
    if (!z || !m || !x) {
        if (!x && oari_error_pending()) return NULL; /* the call that made x keeps its message */
        return oari_null_arg(what, !z ? "ZeRO optimizer" : !m ? "module" : "input"), NULL;
    }
    if (oari_zero_stage(z) != 3)
        return oari_error(OAR_ERR_INVALID, "%s: the ZeRO optimizer is stage %d; only stage 3 gathers parameters "
                          "(call oar_module_forward)", what, oari_zero_stage(z)), NULL;
    if (oari_trace_current) return oari_error(OAR_ERR_UNSUPPORTED, "%s: not while tracing", what), NULL;
    int np = oar_module_parameters(m, NULL, 0);
    if (np < 0) return NULL;
    oar_tensor **mp = oari_obj_calloc((size_t)(np ? np : 1) * sizeof *mp);
    if (!mp) return NULL;
    oar_module_parameters(m, mp, np);
    int u = np ? oari_zero_unit_of(z, np, mp) : -1;
    oari_obj_free(mp, (size_t)(np ? np : 1) * sizeof *mp);
    if (u < 0)
        return oari_error(OAR_ERR_INVALID, "%s: the module (%d parameters) is not wrapped: its parameters are not "
                          "one of the ZeRO optimizer's units (list them in options.unit_params)", what, np), NULL;
    z3 c = {.z = z, .u = u, .m = m};
    oari_rng_get(&c.seed, &c.offset);
    if (oari_zero_unit_gather(z, u)) return NULL;
    oar_no_grad_push();
    oar_tensor *y = oar_module_forward(m, x);
    oar_no_grad_pop();
    int st = y ? 0 : oari_fail_status();
    int rs = oari_zero_unit_release(z, u);
    if (!st) st = rs;
    if (st || !oar_grad_enabled()) return st ? NULL : y;
    if (y == x && !(y = detach_any(y))) return NULL;
    z3 *cc = oari_obj_alloc(sizeof *cc);
    if (!cc) return NULL;
    *cc = c;
    if (!(cc->x = oar_tensor_retain(detach_any(x)))) {
        z3_release(cc);
        return NULL;
    }
    oar_tensor *in[2] = {x, oari_zero_unit_anchor(z, u)};
    struct oari_node *n = oari_node_new_custom(&z3_node_fn, cc, 2, in, 1, &y);
    if (!n) {
        z3_release(cc);
        return NULL;
    }
    oari_node_attach_output(n, 0, y);
    return y;
}

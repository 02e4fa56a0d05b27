/* ZeRO stages 1 and 2 (include/oar/dist.h): the optimizer state of data
 * parallel training sharded over the ranks of one mesh dim.
 *
 * The parameters are laid flat end to end and padded with zeros to N equal
 * shards, so that reduce-scatter and all-gather move even blocks. Each
 * rank keeps one plain tensor, its shard of the flat parameters, and an
 * ordinary optimizer (of the template's kind and hyperparameters) over
 * views of it: its state is the shard's, 1/N of the whole. The update rules
 * are elementwise, so updating a slice of the flat parameters gives the
 * values plain data parallel gives for those elements. Padding stays zero:
 * a zero gradient on a zero parameter moves nothing under any of the
 * rules. It lives in optim because it builds optimizers; dist below it
 * provides the collectives. */
#include "../dist/dist.h"

#include <oar/autograd.h>
#include <oar/ops.h>

#include "optim.h"

struct oar_zero {
    oar_mesh *mesh;          /* retained */
    int dim, stage, accum, micro;
    int n;
    oar_tensor **params;     /* retained dtensors */
    oar_dtype dtype;
    int64_t total;           /* elements of all parameters */
    int64_t chunk, start;    /* this rank's shard of the padded flat parameters */
    int64_t ranks;           /* along dim */
    oar_tensor *shard;       /* [chunk], this rank's parameters */
    int n_pieces;
    oar_tensor **pieces;     /* views of shard of up to PIECE_BYTES: the inner optimizer's parameters */
    oar_optimizer *inner;    /* over pieces */
};

/* The inner optimizer updates the shard in pieces, each in a pool of its
 * own (oar_optim_step), so that its temporaries (about seven tensors of a
 * parameter's size for Adam) stay those of a piece, not of the shard. */
#define PIECE_BYTES ((int64_t)1 << 20)

/* An optimizer of o's kind and hyperparameters over the n tensors p. */
static oar_optimizer *same_kind(const oar_optimizer *o, int n, oar_tensor *const *p) {
    switch (o->kind) {
    case KIND_SGD:
        return oar_sgd_new(n, p, &(oar_sgd_options){.lr = o->lr, .momentum = o->momentum,
                                                      .dampening = o->dampening, .weight_decay = o->wd,
                                                      .nesterov = o->nesterov});
    case KIND_ADAM:
    case KIND_ADAMW: {
        oar_adam_options a = {.lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                              .weight_decay = o->wd};
        return o->kind == KIND_ADAM ? oar_adam_new(n, p, &a) : oar_adamw_new(n, p, &a);
    }
    case KIND_RMSPROP:
        return oar_rmsprop_new(n, p, &(oar_rmsprop_options){.lr = o->lr, .alpha = o->alpha, .eps = o->eps,
                                                              .weight_decay = o->wd, .momentum = o->momentum,
                                                              .centered = o->centered});
    }
    return oari_error(OAR_ERR_INVALID, "oar_zero_new: unknown optimizer kind"), NULL;
}

/* Is t laid out as p[dim] along mesh dim `dim` and Replicate elsewhere? */
static bool replicated_except(const oari_dist_attr *a, int dim) {
    for (int d = 0; d < a->mesh->ndim; d++)
        if (d != dim && a->p[d].kind != OAR_PLACEMENT_REPLICATE) return false;
    return true;
}

/* The flat parameters (or gradients: grads true), padded, as one plain
 * tensor in the current pool; NULL with the error set. */
static oar_tensor *flatten(oar_zero *z, bool grads) {
    int k = 0;
    oar_tensor **flat = oari_calloc((size_t)z->n + 1, sizeof *flat);
    if (!flat) return NULL;
    for (int i = 0; i < z->n; i++) {
        oar_tensor *t = grads ? z->params[i]->grad : z->params[i];
        if (!(flat[k++] = oar_reshape(oar_contiguous(oari_dist(t)->local), 1, (int64_t[]){-1}))) break;
    }
    oar_tensor *r = NULL;
    if (k == z->n && flat[k - 1]) {
        int64_t pad = z->chunk * z->ranks - z->total;
        if (pad) flat[k++] = oar_zeros(z->dtype, 1, (int64_t[]){pad});
        r = k == 1 ? flat[0] : oar_concat(k, flat, 0);
    }
    oari_free(flat, ((size_t)z->n + 1) * sizeof *flat);
    return r;
}

void oar_zero_free(oar_zero *z) {
    if (!z) return;
    for (int i = 0; i < z->n; i++) oar_tensor_release(z->params[i]);
    oari_free(z->params, (size_t)(z->n ? z->n : 1) * sizeof *z->params);
    oar_optim_free(z->inner);
    for (int i = 0; i < z->n_pieces; i++) oar_tensor_release(z->pieces[i]);
    oari_free(z->pieces, (size_t)(z->n_pieces ? z->n_pieces : 1) * sizeof *z->pieces);
    oar_tensor_release(z->shard);
    oar_mesh_release(z->mesh);
    oari_free(z, sizeof *z);
}

oar_zero *oar_zero_new(const oar_optimizer *opt, oar_mesh *mesh, int mesh_dim, const oar_zero_options *o) {
    const char *what = "oar_zero_new";
    if (!opt || !mesh || !o)
        return oari_error(OAR_ERR_INVALID, "%s: the %s is NULL", what, !opt ? "optimizer" : !mesh ? "mesh" : "options"),
               NULL;
    if (o->stage != 1 && o->stage != 2)
        return oari_error(OAR_ERR_INVALID, "%s: stage %d; stages 1 (optimizer state) and 2 (and gradients) "
                          "are done, 3 is not", what, o->stage), NULL;
    if (o->accum_steps < 0) return oari_error(OAR_ERR_INVALID, "%s: accum_steps %d < 0", what, o->accum_steps), NULL;
    if (mesh_dim < 0 || mesh_dim >= mesh->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: mesh dim %d of a %d-d mesh", what, mesh_dim, mesh->ndim), NULL;
    if (mesh->coord[mesh_dim] < 0) return oari_error(OAR_ERR_INVALID, "%s: this rank is outside the mesh", what), NULL;
    if (opt->steps > 0)
        return oari_error(OAR_ERR_INVALID, "%s: the optimizer has taken %lld steps; pass a fresh one (its state "
                          "cannot be sharded)", what, (long long)opt->steps), NULL;
    if (opt->n < 1) return oari_error(OAR_ERR_INVALID, "%s: the optimizer has no parameters", what), NULL;
    int64_t total = 0;
    for (int i = 0; i < opt->n; i++) {
        oar_tensor *p = opt->params[i];
        const oari_dist_attr *a = oari_dist(p);
        char s[200];
        if (!a || a->mesh != mesh || !replicated_except(a, -1))
            return oari_error(OAR_ERR_INVALID, "%s: parameter %d %s is not a dtensor replicated on this mesh "
                              "(oar_parallelize without rules makes them)", what, i,
                              oari_shape_str(s, p->ndim, p->shape)), NULL;
        if (p->dtype != opt->params[0]->dtype)
            return oari_error(OAR_ERR_INVALID, "%s: parameter %d is %s, parameter 0 %s; the flat shards hold one "
                              "dtype", what, i, oar_dtype_name(p->dtype), oar_dtype_name(opt->params[0]->dtype)), NULL;
        total += p->numel;
    }
    oar_zero *z = oari_calloc(1, sizeof *z);
    if (!z) return NULL;
    z->mesh = oari_mesh_retain(mesh);
    z->dim = mesh_dim;
    z->stage = o->stage;
    z->accum = o->accum_steps ? o->accum_steps : 1;
    z->dtype = opt->params[0]->dtype;
    z->total = total;
    z->ranks = mesh->shape[mesh_dim];
    z->chunk = (total + z->ranks - 1) / z->ranks;
    z->start = mesh->coord[mesh_dim] * z->chunk;
    z->params = oari_calloc((size_t)opt->n, sizeof *z->params);
    if (!z->params) {
        oar_zero_free(z);
        return NULL;
    }
    z->n = opt->n;
    for (int i = 0; i < z->n; i++) z->params[i] = oar_tensor_retain(opt->params[i]);
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    oar_tensor *flat = flatten(z, false);
    z->shard = flat ? oar_tensor_retain(oar_clone(oar_slice(flat, 0, z->start, z->start + z->chunk, 1))) : NULL;
    int64_t piece = PIECE_BYTES / (int64_t)oar_dtype_size(z->dtype);
    int n_pieces = (int)((z->chunk + piece - 1) / piece);
    z->pieces = z->shard ? oari_calloc((size_t)n_pieces, sizeof *z->pieces) : NULL;
    if (z->pieces) z->n_pieces = n_pieces;
    for (int k = 0; k < z->n_pieces; k++) {
        int64_t lo = k * piece, hi = lo + piece < z->chunk ? lo + piece : z->chunk;
        if (!(z->pieces[k] = oar_tensor_retain(oar_slice(z->shard, 0, lo, hi, 1)))) z->n_pieces = k;
    }
    oar_no_grad_pop();
    oar_pool_pop(pool);
    if (!z->pieces || z->n_pieces < n_pieces || !(z->inner = same_kind(opt, z->n_pieces, z->pieces))) {
        oar_zero_free(z);
        return NULL;
    }
    return z;
}

/* The summed (or averaged) gradient of this rank's shard, divided by the
 * accumulation count, in the current pool; NULL with the error set. */
static oar_tensor *shard_grad(oar_zero *z) {
    const char *what = "oar_zero_step";
    oar_placement_kind kind = OAR_PLACEMENT_REPLICATE;
    oar_reduce_op op = OAR_REDUCE_SUM;
    for (int i = 0; i < z->n; i++) {
        oar_tensor *g = z->params[i]->grad;
        if (!g) return oari_error(OAR_ERR_INVALID, "%s: parameter %d has no gradient (ZeRO updates every "
                                  "parameter; run backward through all of them)", what, i), NULL;
        if (g->dtype != z->dtype)
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is %s, the parameters %s", what, i,
                              oar_dtype_name(g->dtype), oar_dtype_name(z->dtype)), NULL;
        const oari_dist_attr *a = oari_dist(g);
        if (!a || a->mesh != z->mesh || !replicated_except(a, z->dim))
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is not a dtensor on the ZeRO "
                              "mesh, Replicate but along mesh dim %d", what, i, z->dim), NULL;
        oar_placement p = a->p[z->dim];
        bool ok = p.kind == OAR_PLACEMENT_REPLICATE ||
                  (p.kind == OAR_PLACEMENT_PARTIAL && (p.reduce == OAR_REDUCE_SUM || p.reduce == OAR_REDUCE_AVG));
        if (ok && i > 0) ok = p.kind == kind && (kind != OAR_PLACEMENT_PARTIAL || p.reduce == op);
        if (!ok) {
            char s[64];
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is %s along mesh dim %d; ZeRO "
                              "takes Partial(sum) or Partial(avg), or Replicate, the same for every parameter",
                              what, i, oar_placements_str(z->mesh, a->p, s, sizeof s), z->dim), NULL;
        }
        kind = p.kind;
        op = p.reduce;
    }
    oar_tensor *buf = flatten(z, true), *mine;
    if (!buf) return NULL;
    /* packed: the parameters' own gradients can go before the collective */
    for (int i = 0; i < z->n; i++) oar_tensor_zero_grad(z->params[i]);
    if (kind == OAR_PLACEMENT_REPLICATE) /* already reduced: nothing to communicate */
        mine = oar_slice(buf, 0, z->start, z->start + z->chunk, 1);
    else if (z->stage == 1) { /* all-reduce, keep the shard */
        oar_tensor *sum = oari_pool_adopt(oari_all_reduce(buf, op, z->mesh, z->dim));
        mine = sum ? oar_slice(sum, 0, z->start, z->start + z->chunk, 1) : NULL;
    } else /* stage 2: receive only the shard */
        mine = oari_pool_adopt(oari_reduce_scatter(buf, 0, op, z->mesh, z->dim));
    if (mine && z->accum > 1) mine = oar_div_scalar(mine, (double)z->accum);
    return mine ? oar_contiguous(mine) : NULL;
}

/* One update: the shard's gradient, the inner step, the all-gather and the
 * copy back into every rank's parameters. Each phase in a pool of its own,
 * so that the full-size buffers of one are gone before the next. 0 or the
 * status. */
static int update(oar_zero *z) {
    oar_pool *pool = oar_pool_push();
    oar_tensor *g = oar_tensor_retain(shard_grad(z));
    oar_pool_pop(pool);
    if (!g) return oari_fail_status();
    pool = oar_pool_push();
    int64_t off = 0;
    for (int k = 0; k < z->n_pieces; k++) {
        oar_tensor *piece = z->pieces[k];
        oar_tensor_zero_grad(piece);
        piece->grad = oar_tensor_retain(oar_slice(g, 0, off, off + piece->numel, 1));
        off += piece->numel;
    }
    oar_tensor_release(g);
    oar_pool_pop(pool);
    int st = oar_optim_step(z->inner);
    for (int k = 0; k < z->n_pieces; k++) oar_tensor_zero_grad(z->pieces[k]);
    if (st) return oari_fail_status();
    oar_tensor *full = oari_pool_adopt(oari_all_gather(z->shard, 0, z->mesh, z->dim));
    if (!full) return oari_fail_status();
    off = 0;
    for (int i = 0; i < z->n; i++) {
        oar_tensor *local = oari_dist(z->params[i])->local;
        oar_tensor *part = oar_reshape(oar_slice(full, 0, off, off + local->numel, 1), local->ndim, local->shape);
        if (!part || oar_copy_(local, part)) return oari_fail_status();
        off += local->numel;
    }
    return 0;
}

int oar_zero_step(oar_zero *z) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    if (++z->micro < z->accum) return 0;
    z->micro = 0;
    oar_no_grad_push();
    oar_pool *pool = oar_pool_push();
    int st = update(z);
    oar_pool_pop(pool);
    oar_no_grad_pop();
    for (int i = 0; i < z->n; i++) oar_tensor_zero_grad(z->params[i]);
    return st ? -1 : 1;
}

oar_optimizer *oar_zero_inner(oar_zero *z) {
    return z ? z->inner : (oari_null_arg(__func__, "ZeRO optimizer"), NULL);
}

int64_t oar_zero_state_bytes(const oar_zero *z) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    const oar_optimizer *o = z->inner;
    int64_t bytes = 0;
    for (int i = 0; i < o->n; i++) {
        oar_tensor *state[3] = {o->s1[i], o->s2[i], o->s3[i]};
        for (int k = 0; k < 3; k++)
            if (state[k]) bytes += state[k]->numel * (int64_t)oar_dtype_size(state[k]->dtype);
    }
    return bytes;
}

int64_t oar_zero_shard(const oar_zero *z, int64_t *start, int64_t *total) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    if (start) *start = z->start;
    if (total) *total = z->chunk * z->ranks;
    return z->chunk;
}

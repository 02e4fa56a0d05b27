/* ZeRO stages 1, 2 and 3 (include/oar/dist.h): the optimizer state of data
 * parallel training (2: and the reduced gradients; 3: and the parameters)
 * sharded over the ranks of one mesh dim.
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
 * provides the collectives.
 *
 * Stage 3 cuts the parameters into units (modules), each flat and padded
 * on its own, so that one unit can be gathered at a time; the shard is
 * then the concatenation of this rank's shard of every unit. A unit's
 * forward runs with no grad between a gather and a free, and one custom
 * autograd node (as checkpoint.c's) stands for it: its backward gathers,
 * recomputes with grad on, takes oar_grad of the module, reduce-scatters
 * the parameter gradients into `gshard` and frees. A freed parameter's
 * local tensor is a stride-0 view of one zero, so reading it reads zeros
 * and its shape stays true. */
#include "../autograd/node.h"
#include "../dist/dist.h"

#include <oar/autograd.h>
#include <oar/ops.h>

#include "optim.h"
#include "zero.h"

/* Stage 3: a module whose parameters are gathered together. */
typedef struct unit {
    oar_module *mod;         /* borrowed */
    int first, n;            /* its parameters: z->params[first .. first + n) */
    int64_t total, chunk;    /* its elements; its shard's length (padded: chunk x ranks) */
    int64_t soff;            /* where its shard starts in z->shard */
    oar_tensor *full;        /* [chunk x ranks] while gathered, else NULL */
    oar_tensor *anchor;      /* a 0-d leaf that requires grad: the node's edge, so backward reaches it */
    bool got_grad;           /* a backward reduced into gshard since the last update */
} unit;

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
    int n_units;             /* stage 3 */
    unit *units;
    oar_tensor *gshard;      /* stage 3: [chunk], the gradient reduced into the shard since the update */
    oar_tensor *host;        /* offload: the shard's copy in host memory, which the pieces view */
    int64_t param_bytes, peak_param_bytes;
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

/* The local tensors of the dtensors t[0..n) laid flat end to end and
 * padded with zeros to `padded` elements, as one plain tensor in the
 * current pool; a NULL t[i] counts as zeros of like[i]'s size. NULL with
 * the error set. */
static oar_tensor *flat_of(int n, oar_tensor *const *t, oar_tensor *const *like, int64_t padded, oar_dtype dt) {
    int k = 0;
    int64_t total = 0;
    oar_tensor **flat = oari_calloc((size_t)n + 1, sizeof *flat);
    if (!flat) return NULL;
    for (int i = 0; i < n; i++) {
        total += like[i]->numel;
        flat[k] = t[i] ? oar_reshape(oar_contiguous(oari_dist(t[i])->local), 1, (int64_t[]){-1})
                       : oar_zeros(dt, 1, (int64_t[]){like[i]->numel});
        if (!flat[k++]) break;
    }
    oar_tensor *r = NULL;
    if (k == n && flat[k - 1]) {
        if (padded > total) flat[k++] = oar_zeros(dt, 1, (int64_t[]){padded - total});
        r = k == 1 ? flat[0] : oar_concat(k, flat, 0);
    }
    oari_free(flat, ((size_t)n + 1) * sizeof *flat);
    return r;
}

/* The flat parameters (or gradients: grads true), padded, as one plain
 * tensor in the current pool; NULL with the error set. */
static oar_tensor *flatten(oar_zero *z, bool grads) {
    oar_tensor **g = oari_calloc((size_t)z->n, sizeof *g);
    if (!g) return NULL;
    for (int i = 0; i < z->n; i++) g[i] = grads ? z->params[i]->grad : z->params[i];
    oar_tensor *r = flat_of(z->n, g, z->params, z->chunk * z->ranks, z->dtype);
    oari_free(g, (size_t)z->n * sizeof *g);
    return r;
}

/* ---- stage 3: gathering and freeing a unit ------------------------------ */

static int64_t dsize(const oar_zero *z) { return (int64_t)oar_dtype_size(z->dtype); }

/* Sets the local tensor of dtensor p to v (retained; the old released). */
static void set_local(oar_tensor *p, oar_tensor *v) {
    oari_dist_attr *a = oari_dist(p);
    oar_tensor *old = a->local;
    a->local = oar_tensor_retain(v);
    oar_tensor_release(old);
}

/* Frees u's parameters: each local becomes a stride-0 view of one zero. */
static int unit_free(oar_zero *z, unit *u) {
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    int st = 0;
    for (int i = u->first; i < u->first + u->n && !st; i++) {
        oar_tensor *p = z->params[i];
        oar_tensor *zero = oar_expand(oar_zeros(z->dtype, 0, NULL), p->ndim, p->shape);
        if (!zero) st = oari_fail_status();
        else set_local(p, zero);
    }
    oar_no_grad_pop();
    oar_pool_pop(pool);
    if (u->full) {
        oar_tensor_release(u->full);
        u->full = NULL;
        z->param_bytes -= u->chunk * z->ranks * dsize(z);
    }
    return st;
}

/* All-gathers u's parameters from the shards and points their locals at
 * the gathered buffer. 0 or the status (u left freed). Collective. */
static int unit_gather(oar_zero *z, unit *u) {
    if (u->full) return 0;
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    int st = 0;
    oar_tensor *mine = oar_contiguous(oar_slice(z->shard, 0, u->soff, u->soff + u->chunk, 1));
    u->full = mine ? oari_all_gather(mine, 0, z->mesh, z->dim) : NULL;
    if (!u->full) st = oari_fail_status();
    else {
        z->param_bytes += u->chunk * z->ranks * dsize(z);
        if (z->param_bytes > z->peak_param_bytes) z->peak_param_bytes = z->param_bytes;
    }
    int64_t off = 0;
    for (int i = u->first; i < u->first + u->n && !st; i++) {
        oar_tensor *p = z->params[i];
        oar_tensor *v = oar_reshape(oar_slice(u->full, 0, off, off + p->numel, 1), p->ndim, p->shape);
        if (!v) st = oari_fail_status();
        else set_local(p, v);
        off += p->numel;
    }
    oar_no_grad_pop();
    oar_pool_pop(pool);
    if (st) unit_free(z, u);
    return st;
}

void oar_zero_free(oar_zero *z) {
    if (!z) return;
    for (int u = 0; u < z->n_units; u++) {
        oar_tensor_release(z->units[u].full);
        oar_tensor_release(z->units[u].anchor);
    }
    oari_free(z->units, (size_t)(z->n_units ? z->n_units : 1) * sizeof *z->units);
    for (int i = 0; i < z->n; i++) oar_tensor_release(z->params[i]);
    oari_free(z->params, (size_t)(z->n ? z->n : 1) * sizeof *z->params);
    oar_optim_free(z->inner);
    for (int i = 0; i < z->n_pieces; i++) oar_tensor_release(z->pieces[i]);
    oari_free(z->pieces, (size_t)(z->n_pieces ? z->n_pieces : 1) * sizeof *z->pieces);
    oar_tensor_release(z->shard);
    oar_tensor_release(z->gshard);
    oar_tensor_release(z->host);
    oar_mesh_release(z->mesh);
    oari_free(z, sizeof *z);
}

/* Stage 3: z->params (opt's) cut into z->units as o->unit_params says.
 * 0 or the status. */
static int make_units(oar_zero *z, const oar_optimizer *opt, const oar_zero_options *o) {
    const char *what = "oar_zero_new";
    if (o->n_units < 1 || !o->unit_params)
        return oari_error(OAR_ERR_INVALID, "%s: stage 3 needs its units (options.unit_params, n_units = %d): "
                          "how many parameters each module gathered together holds", what, o->n_units);
    int sum = 0;
    for (int u = 0; u < o->n_units; u++) {
        if (o->unit_params[u] < 1)
            return oari_error(OAR_ERR_INVALID, "%s: unit %d has %d parameters (run a module without parameters "
                              "with oar_module_forward)", what, u, o->unit_params[u]);
        if (o->unit_params[u] > opt->n - sum) {
            sum = opt->n + 1;
            break;
        }
        sum += o->unit_params[u];
    }
    if (sum != opt->n)
        return oari_error(OAR_ERR_INVALID, "%s: the units hold %s parameters, the optimizer %d; every parameter "
                          "must be in exactly one unit", what, sum > opt->n ? "more" : "fewer", opt->n);
    for (int i = 0; i < opt->n; i++)
        for (int k = 0; k < i; k++)
            if (opt->params[k] == opt->params[i])
                return oari_error(OAR_ERR_INVALID, "%s: parameters %d and %d are one tensor", what, k, i);
    if (!(z->units = oari_calloc((size_t)o->n_units, sizeof *z->units))) return oari_fail_status();
    z->n_units = o->n_units;
    if (!(z->params = oari_calloc((size_t)opt->n, sizeof *z->params))) return oari_fail_status();
    for (int i = 0; i < opt->n; i++) z->params[i] = oar_tensor_retain(opt->params[i]);
    z->n = opt->n;
    for (int u = 0, first = 0; u < o->n_units; u++) {
        unit *un = &z->units[u];
        un->first = first;
        un->n = o->unit_params[u];
        first += un->n;
        for (int i = un->first; i < first; i++) un->total += z->params[i]->numel;
        un->chunk = (un->total + z->ranks - 1) / z->ranks;
        un->soff = z->chunk;
        z->chunk += un->chunk;
    }
    return 0;
}

/* Stage 3: the shard, this rank's shard of every unit, one after another;
 * the anchors; then every unit freed. 0 or the status. */
static int shard_units(oar_zero *z) {
    int st = 0;
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    oar_tensor **parts = oari_calloc((size_t)z->n_units, sizeof *parts);
    if (!parts) st = oari_fail_status();
    int64_t me = z->mesh->coord[z->dim];
    for (int u = 0; u < z->n_units && !st; u++) {
        unit *un = &z->units[u];
        oar_tensor *f = flat_of(un->n, z->params + un->first, z->params + un->first, un->chunk * z->ranks, z->dtype);
        parts[u] = f ? oar_slice(f, 0, me * un->chunk, (me + 1) * un->chunk, 1) : NULL;
        oar_tensor *a = oar_zeros(z->dtype, 0, NULL);
        if (!parts[u] || !a || oar_tensor_set_requires_grad(a, true)) st = oari_fail_status();
        else un->anchor = oar_tensor_retain(a);
    }
    if (!st) z->shard = oar_tensor_retain(oar_contiguous(z->n_units == 1 ? parts[0] : oar_concat(z->n_units, parts, 0)));
    if (!st && !z->shard) st = oari_fail_status();
    if (parts) oari_free(parts, (size_t)z->n_units * sizeof *parts);
    oar_no_grad_pop();
    oar_pool_pop(pool);
    for (int u = 0; u < z->n_units && !st; u++) st = unit_free(z, &z->units[u]);
    return st;
}

oar_zero *oar_zero_new(const oar_optimizer *opt, oar_mesh *mesh, int mesh_dim, const oar_zero_options *o) {
    const char *what = "oar_zero_new";
    if (!opt || !mesh || !o)
        return oari_error(OAR_ERR_INVALID, "%s: the %s is NULL", what, !opt ? "optimizer" : !mesh ? "mesh" : "options"),
               NULL;
    if (o->stage < 1 || o->stage > 3)
        return oari_error(OAR_ERR_INVALID, "%s: stage %d; the stages are 1 (optimizer state), 2 (and gradients) "
                          "and 3 (and parameters)", what, o->stage), NULL;
    if (o->stage < 3 && (o->n_units || o->unit_params))
        return oari_error(OAR_ERR_INVALID, "%s: units are for stage 3, not stage %d", what, o->stage), NULL;
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
    int64_t es = dsize(z);
    if (z->stage == 3) {
        if (make_units(z, opt, o) || shard_units(z)) {
            oar_zero_free(z);
            return NULL;
        }
        z->start = mesh->coord[mesh_dim] * z->chunk;
        z->param_bytes = z->peak_param_bytes = z->chunk * es;
    } else {
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
        oar_no_grad_pop();
        oar_pool_pop(pool);
        z->param_bytes = z->peak_param_bytes = (total + z->chunk) * es;
    }
    /* the optimizer's parameters: views of the shard, or with offload of
     * its copy in host memory */
    oar_tensor *base = z->shard;
    if (base && o->offload_state) {
        oar_pool *pool = oar_pool_push();
        oar_no_grad_push();
        oar_tensor *h = oar_tensor_device(base) == oar_device_cpu() ? oar_clone(base)
                                                                     : oar_tensor_to(base, oar_device_cpu());
        z->host = oar_tensor_retain(h);
        oar_no_grad_pop();
        oar_pool_pop(pool);
        base = z->host;
    }
    int64_t piece = PIECE_BYTES / es;
    int n_pieces = (int)((z->chunk + piece - 1) / piece);
    z->pieces = base ? oari_calloc((size_t)n_pieces, sizeof *z->pieces) : NULL;
    if (z->pieces) z->n_pieces = n_pieces;
    oar_pool *pool = oar_pool_push();
    for (int k = 0; k < z->n_pieces; k++) {
        int64_t lo = k * piece, hi = lo + piece < z->chunk ? lo + piece : z->chunk;
        if (!(z->pieces[k] = oar_tensor_retain(oar_slice(base, 0, lo, hi, 1)))) z->n_pieces = k;
    }
    oar_pool_pop(pool);
    if (!z->pieces || z->n_pieces < n_pieces || !(z->inner = same_kind(opt, z->n_pieces, z->pieces))) {
        oar_zero_free(z);
        return NULL;
    }
    return z;
}

/* The layout of gradients g[0..n) (of parameters base..base+n; NULL ones
 * are skipped): Replicate, or Partial(sum or avg), along the mesh dim, the
 * same for all, Replicate elsewhere, into *kind and *op. 0 or the status. */
static int grad_layout(const oar_zero *z, int n, oar_tensor *const *g, int base, oar_placement_kind *kind,
                       oar_reduce_op *op) {
    const char *what = "oar_zero_step";
    bool first = true;
    *kind = OAR_PLACEMENT_REPLICATE;
    *op = OAR_REDUCE_SUM;
    for (int k = 0; k < n; k++) {
        int i = base + k;
        if (!g[k]) continue;
        if (g[k]->dtype != z->dtype)
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is %s, the parameters %s", what, i,
                              oar_dtype_name(g[k]->dtype), oar_dtype_name(z->dtype));
        const oari_dist_attr *a = oari_dist(g[k]);
        if (!a || a->mesh != z->mesh || !replicated_except(a, z->dim))
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is not a dtensor on the ZeRO "
                              "mesh, Replicate but along mesh dim %d", what, i, z->dim);
        oar_placement p = a->p[z->dim];
        bool ok = p.kind == OAR_PLACEMENT_REPLICATE ||
                  (p.kind == OAR_PLACEMENT_PARTIAL && (p.reduce == OAR_REDUCE_SUM || p.reduce == OAR_REDUCE_AVG));
        if (ok && !first) ok = p.kind == *kind && (*kind != OAR_PLACEMENT_PARTIAL || p.reduce == *op);
        if (!ok) {
            char s[64];
            return oari_error(OAR_ERR_INVALID, "%s: the gradient of parameter %d is %s along mesh dim %d; ZeRO "
                              "takes Partial(sum) or Partial(avg), or Replicate, the same for every parameter",
                              what, i, oar_placements_str(z->mesh, a->p, s, sizeof s), z->dim);
        }
        *kind = p.kind;
        *op = p.reduce;
        first = false;
    }
    return 0;
}

/* The summed (or averaged) gradient of this rank's shard, divided by the
 * accumulation count, in the current pool; NULL with the error set. */
static oar_tensor *shard_grad(oar_zero *z) {
    const char *what = "oar_zero_step";
    if (z->stage == 3) {
        for (int u = 0; u < z->n_units; u++)
            if (!z->units[u].got_grad)
                return oari_error(OAR_ERR_INVALID, "%s: unit %d got no gradient since the last update (ZeRO "
                                  "updates every parameter; run backward through every unit's oar_zero_forward)",
                                  what, u), NULL;
        oar_tensor *g = z->gshard;
        return z->accum > 1 ? oar_div_scalar(g, (double)z->accum) : g;
    }
    oar_placement_kind kind;
    oar_reduce_op op;
    for (int i = 0; i < z->n; i++)
        if (!z->params[i]->grad)
            return oari_error(OAR_ERR_INVALID, "%s: parameter %d has no gradient (ZeRO updates every "
                              "parameter; run backward through all of them)", what, i), NULL;
    oar_tensor **g = oari_calloc((size_t)z->n, sizeof *g);
    if (!g) return NULL;
    for (int i = 0; i < z->n; i++) g[i] = z->params[i]->grad;
    int st = grad_layout(z, z->n, g, 0, &kind, &op);
    oari_free(g, (size_t)z->n * sizeof *g);
    if (st) return NULL;
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
        oar_tensor *gp = oar_slice(g, 0, off, off + piece->numel, 1);
        if (z->host && gp && oar_tensor_device(gp) != oar_device_cpu()) gp = oar_tensor_to(gp, oar_device_cpu());
        piece->grad = oar_tensor_retain(gp);
        off += piece->numel;
    }
    oar_tensor_release(g);
    oar_pool_pop(pool);
    int st = oar_optim_step(z->inner);
    for (int k = 0; k < z->n_pieces; k++) oar_tensor_zero_grad(z->pieces[k]);
    if (st) return oari_fail_status();
    if (z->host && oar_copy_(z->shard, z->host)) return oari_fail_status(); /* offload: the stepped copy back */
    if (z->stage == 3) return 0; /* the shards are the parameters */
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
    oar_tensor_release(z->gshard);
    z->gshard = NULL;
    for (int u = 0; u < z->n_units; u++) z->units[u].got_grad = false;
    return st ? -1 : 1;
}

/* ---- stage 3: what src/nn/zero3.c calls (zero.h) ------------------------ */

int oari_zero_stage(const oar_zero *z) { return z->stage; }

int oari_zero_unit_of(const oar_zero *z, int n, oar_tensor *const *p) {
    for (int u = 0; u < z->n_units; u++) {
        const unit *un = &z->units[u];
        bool same = un->n == n;
        for (int i = 0; i < n && same; i++) same = z->params[un->first + i] == p[i];
        if (same) return u;
    }
    return -1;
}

int oari_zero_unit_params(const oar_zero *z, int u, oar_tensor *const **p) {
    *p = z->params + z->units[u].first;
    return z->units[u].n;
}

oar_tensor *oari_zero_unit_anchor(const oar_zero *z, int u) { return z->units[u].anchor; }

int oari_zero_unit_gather(oar_zero *z, int u) { return unit_gather(z, &z->units[u]); }

int oari_zero_unit_release(oar_zero *z, int u) { return unit_free(z, &z->units[u]); }

int oari_zero_unit_reduce(oar_zero *z, int u, oar_tensor *const *g) {
    unit *un = &z->units[u];
    oar_placement_kind kind;
    oar_reduce_op op;
    if (grad_layout(z, un->n, g, un->first, &kind, &op)) return oari_fail_status();
    int st = 0;
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    oar_tensor *buf = flat_of(un->n, g, z->params + un->first, un->chunk * z->ranks, z->dtype), *mine = NULL;
    if (buf && kind == OAR_PLACEMENT_REPLICATE) /* already reduced: nothing to communicate */
        mine = oar_slice(buf, 0, z->mesh->coord[z->dim] * un->chunk, (z->mesh->coord[z->dim] + 1) * un->chunk, 1);
    else if (buf)
        mine = oari_pool_adopt(oari_reduce_scatter(buf, 0, op, z->mesh, z->dim));
    if (mine && !z->gshard) {
        oar_tensor *zs = oar_zeros_like(z->shard);
        z->gshard = zs ? oar_tensor_retain(zs) : NULL;
    }
    oar_tensor *dst = mine && z->gshard ? oar_slice(z->gshard, 0, un->soff, un->soff + un->chunk, 1) : NULL;
    if (!dst || oar_add_scaled_(dst, mine, 1.0)) st = oari_fail_status();
    else un->got_grad = true;
    oar_no_grad_pop();
    oar_pool_pop(pool);
    return st;
}

int oar_zero_gather_params(oar_zero *z) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    for (int u = 0; u < z->n_units; u++)
        if (unit_gather(z, &z->units[u])) return -1;
    return 0;
}

int oar_zero_release_params(oar_zero *z) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    for (int u = 0; u < z->n_units; u++)
        if (unit_free(z, &z->units[u])) return -1;
    return 0;
}

int64_t oar_zero_param_bytes(const oar_zero *z, int64_t *peak) {
    if (!z) return oari_null_arg(__func__, "ZeRO optimizer"), -1;
    if (peak) *peak = z->peak_param_bytes;
    return z->param_bytes;
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

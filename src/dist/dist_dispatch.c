/* Ops on dtensors (invariant 3 of docs/architecture.md, distributed branch): dispatch
 * sends every call with a dtensor input here. The op's shape rule runs on
 * the global shapes, the sharding rule picks placements, inputs are
 * resharded to them, the op runs on the local shards through the ordinary
 * dispatch, and the outputs are wrapped as dtensors. */
#include "dist.h"
#include "../autograd/node.h" /* oari_autograd_record */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t fallbacks;

int64_t oar_dist_fallback_count(void) { return __atomic_load_n(&fallbacks, __ATOMIC_RELAXED); }

static bool wants_grad(const oari_op_def *def, int n_in, oar_tensor *const *in) {
    if ((def->flags & OARI_F_NONDIFF) || !oari_grad_mode_enabled()) return false;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        if (in[i]->requires_grad) return true;
    }
    return false;
}

/* devices: a plain input is a replicated value; when the dtensors' shards
 * live on a device, its local copy (*t, owned) joins them there, as a 0-d
 * CPU input follows a device in plain dispatch (gradient rules make their
 * seeds and constants on the CPU). Outside autograd: the call is recorded
 * on the dtensors. */
static int to_shard_device(oar_tensor **t, oar_tensor *const *in, int n_in) {
    oar_device *dev = NULL;
    for (int i = 0; i < n_in && !dev; i++)
        if (in[i] && oari_dist(in[i]) && oari_dist(in[i])->local->storage) dev = oari_dist(in[i])->local->storage->device;
    if (!*t || !dev || !(*t)->storage || (*t)->storage->device == dev) return 0;
    oar_pool *p = oar_pool_push();
    oari_no_grad_push();
    oar_tensor *m = oar_tensor_to(*t, dev);
    oari_no_grad_pop();
    m = oari_pop_owned(p, m);
    oar_tensor_release(*t);
    *t = m;
    return m ? 0 : oari_fail_status();
}

/* fill_, copy_ and add_scaled_ into a dtensor: each rank writes its shard
 * (the source resharded to match), so the target keeps its placements. */
static int inplace(oari_op op, const oari_op_def *def, int n_in, oar_tensor *const *in,
                   const oari_attrs *attrs, oar_tensor **out) {
    oar_tensor *dst = in[0];
    if (!oari_dist(dst) || (op != OARI_OP_fill && op != OARI_OP_copy && op != OARI_OP_add_scaled))
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: in-place op on dtensors is not supported yet%s",
                          def->name, oari_dist(dst) ? "" : " (the target must be the dtensor)");
    if (oari_grad_mode_enabled() && dst->requires_grad)
        return oari_error(OAR_ERR_STATE, "%s: in-place write into a tensor that requires grad; do it "
                          "inside oar_no_grad_push/pop (an optimizer step) or on a clone", def->name);
    oari_dist_attr *a = oari_dist(dst);
    oar_mesh *m = a->mesh;
    for (int d = 0; d < m->ndim; d++)
        if (a->p[d].kind == OAR_PLACEMENT_PARTIAL)
            return oari_error(OAR_ERR_UNSUPPORTED, "%s: writing into a Partial dtensor; reshard it to "
                              "Replicate or Shard first", def->name);
    oar_tensor *local[2] = {a->local, NULL}, *r = NULL;
    int st = 0;
    if (n_in == 2) {
        oar_tensor *src = in[1];
        if (oari_dist(src) && oari_dist(src)->mesh != m)
            return oari_error(OAR_ERR_INVALID, "%s: dtensor inputs live on different meshes", def->name);
        /* the source dims that line up with the target's sharded dims */
        oar_placement from[OAR_MESH_MAX_DIMS], to[OAR_MESH_MAX_DIMS];
        for (int d = 0; d < m->ndim; d++) {
            from[d] = oari_dist(src) ? oari_dist(src)->p[d] : oar_replicate();
            to[d] = oar_replicate();
            if (a->p[d].kind != OAR_PLACEMENT_SHARD) continue;
            int k = a->p[d].dim - (dst->ndim - src->ndim);
            if (k >= 0 && src->shape[k] == dst->shape[a->p[d].dim]) to[d] = oar_shard(k);
        }
        local[1] = oari_reshard_local(oari_dist(src) ? oari_dist(src)->local : src, m, src->shape, from, to);
        if (!local[1]) return OAR_ERR_INVALID;
        if (!oari_dist(src) && (st = to_shard_device(&local[1], in, n_in))) return st; /* devices */
    }
    oari_no_grad_push();
    st = oari_dispatch(op, n_in, local, attrs, &r);
    oari_no_grad_pop();
    oar_tensor_release(r);
    oar_tensor_release(local[1]);
    if (!st) out[0] = oar_tensor_retain(dst);
    return st;
}

static int dist_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                         oar_tensor **out) {
    const oari_op_def *def = oari_op_defs[op];
    oar_mesh *mesh = NULL;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !oari_dist(in[i])) continue;
        if (!mesh) mesh = oari_dist(in[i])->mesh;
        else if (oari_dist(in[i])->mesh != mesh)
            return oari_error(OAR_ERR_INVALID, "%s: dtensor inputs live on different meshes; reshard "
                              "them onto one", def->name);
    }
    if (!mesh) return oari_error(OAR_ERR_INVALID, "%s: no dtensor input", def->name);
    if (def->flags & OARI_F_INPLACE) return inplace(op, def, n_in, in, attrs, out);
    /* The local ops run outside autograd; the call is recorded on the
     * dtensors themselves, so gradient rules (ops) run on dtensors too. */
    bool record = wants_grad(def, n_in, in);
    if (op == OARI_OP_dist_reshard) {
        int st = def->infer(&(oari_infer){.op = def->name, .n_in = 1, .in = in, .attrs = attrs});
        if (!st) st = oari_dist_reshard_run(in[0], attrs, out);
        if (!st && record && (st = oari_autograd_record(op, attrs, n_in, in, 1, out))) {
            oar_tensor_release(out[0]);
            out[0] = NULL;
        }
        return st;
    }

    /* The shape rule on global shapes: dtensors carry them. */
    oari_infer c;
    memset(&c, 0, sizeof c);
    c.op = def->name;
    c.n_in = n_in;
    c.in = in;
    c.attrs = attrs;
    for (int i = 0; i < n_in; i++) c.in_dtype[i] = in[i] ? in[i]->dtype : OAR_F32;
    c.kernel_dtype = n_in ? in[0]->dtype : OAR_F32;
    int st = def->infer(&c);
    if (st) return st;
    /* Inputs the shape rule wants in another dtype (fft of a real input)
     * are cast first, as plain dispatch does: the casts are recorded, so
     * the gradient rule sees the dtypes it was written for. */
    if (!(def->flags & OARI_F_VIEW)) {
        oar_tensor *cin[OARI_MAX_IN] = {0};
        int n_cast = 0;
        for (int i = 0; i < n_in && !st; i++) {
            cin[i] = in[i];
            if (!in[i] || in[i]->dtype == c.in_dtype[i]) continue;
            oari_attrs ca = {.ni = 1, .i = {c.in_dtype[i]}};
            cin[i] = NULL;
            if (!(st = oari_dispatch(OARI_OP_cast, 1, &in[i], &ca, &cin[i]))) n_cast++;
        }
        if (n_cast && !st) st = dist_dispatch(op, n_in, cin, attrs, out);
        for (int i = 0; i < n_in && n_cast; i++)
            if (cin[i] != in[i]) oar_tensor_release(cin[i]);
        if (n_cast || st) return st;
    }

    static _Thread_local oar_placement in_p[OARI_MAX_IN][OAR_MESH_MAX_DIMS];
    static _Thread_local oari_shard_plan plan;
    for (int i = 0; i < n_in; i++)
        for (int d = 0; d < mesh->ndim; d++)
            in_p[i][d] = in[i] && oari_dist(in[i]) ? oari_dist(in[i])->p[d] : oar_replicate();
    static _Thread_local oari_meta in_meta[OARI_MAX_IN];
    for (int i = 0; i < n_in; i++) {
        in_meta[i] = (oari_meta){.dtype = in[i] ? in[i]->dtype : OAR_F32, .ndim = in[i] ? in[i]->ndim : -1};
        if (in[i]) memcpy(in_meta[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
    }
    plan.local_attrs = false;
    /* rules_vocab.c: calls whose local op is not the op (vocab-parallel) */
    int special = oari_shard_special(op, n_in, in_meta, in_p, attrs, c.out, mesh, &plan);
    int has_rule = special ? 1 : oari_shard_rule(op, def, n_in, in_meta, in_p, attrs, c.out, mesh, &plan);
    if (has_rule < 0) return OAR_ERR_INVALID;
    if (!has_rule) {
        __atomic_add_fetch(&fallbacks, 1, __ATOMIC_RELAXED);
        if (getenv("OAR_DIST_DEBUG")) fprintf(stderr, "dist: %s has no sharding rule; replicated\n", def->name);
        for (int i = 0; i < n_in; i++)
            for (int d = 0; d < mesh->ndim; d++) plan.in[i][d] = oar_replicate();
        for (int j = 0; j < def->n_out; j++)
            for (int d = 0; d < mesh->ndim; d++) plan.out[j][d] = oar_replicate();
    }

    oar_tensor *local[OARI_MAX_IN] = {0}, *lout[OARI_MAX_OUT] = {0};
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i]) continue;
        oar_tensor *src = oari_dist(in[i]) ? oari_dist(in[i])->local : in[i];
        local[i] = oari_reshard_local(src, mesh, in[i]->shape, in_p[i], plan.in[i]);
        if (!local[i]) st = OAR_ERR_INVALID;
        else if (!oari_dist(in[i])) st = to_shard_device(&local[i], in, n_in); /* devices */
    }
    /* a view needs a viewable shard: shards of permuted dtensors may not be */
    if (!st && op == OARI_OP_view && !oar_tensor_is_contiguous(local[0])) {
        oar_pool *p = oar_pool_push();
        oar_tensor *c = oari_pop_owned(p, oar_contiguous(local[0]));
        oar_tensor_release(local[0]);
        if (!(local[0] = c)) st = oari_fail_status();
    }
    if (!st) {
        oari_no_grad_push();
        st = special ? oari_shard_special_run(op, n_in, local, in_meta, attrs, mesh, &plan, lout)
                     : oari_dispatch(op, n_in, local, plan.local_attrs ? &plan.attrs : attrs, lout);
        oari_no_grad_pop();
    }
    for (int j = 0; j < def->n_out && !st; j++) {
        out[j] = oari_dtensor_wrap(lout[j], mesh, plan.out[j], c.out[j].ndim, c.out[j].shape);
        if (!out[j]) st = oari_fail_status();
    }
    if (!st && record) st = oari_autograd_record(op, attrs, n_in, in, def->n_out, out);
    for (int i = 0; i < n_in; i++) oar_tensor_release(local[i]);
    for (int j = 0; j < def->n_out; j++) oar_tensor_release(lout[j]);
    if (st)
        for (int j = 0; j < def->n_out; j++) {
            oar_tensor_release(out[j]);
            out[j] = NULL;
        }
    return st;
}

void oari_dist_install(void) {
    oari_ext_register(OARI_EXT_DIST, &oari_dist_ext_class);
    oari_op_install(OARI_OP_dist_reshard, &oari_def_dist_reshard);
    oari_hooks.dist = dist_dispatch;
    oari_hooks.dist_local = oar_dtensor_local;
    /* static auto parallel's collective nodes (collective_ops.c), so that a
     * saved partitioned graph loads in any process (on failure: retried on use) */
    if (oari_co_register()) oar_clear_error();
}

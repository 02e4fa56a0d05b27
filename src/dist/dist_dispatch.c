/* Ops on dtensors (DESIGN.md invariant 3, distributed branch): dispatch
 * sends every call with a dtensor input here. The op's shape rule runs on
 * the global shapes, the sharding rule picks placements, inputs are
 * resharded to them, the op runs on the local shards through the ordinary
 * dispatch, and the outputs are wrapped as dtensors. */
#include "dist.h"

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

int oari_dist_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                       oar_tensor **out) {
    const oari_op_def *def = oari_op_defs[op];
    oar_mesh *mesh = NULL;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !in[i]->dist) continue;
        if (!mesh) mesh = in[i]->dist->mesh;
        else if (in[i]->dist->mesh != mesh)
            return oari_error(OAR_ERR_INVALID, "%s: dtensor inputs live on different meshes; reshard "
                              "them onto one", def->name);
    }
    if (def->flags & OARI_F_INPLACE)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: in-place ops on dtensors are not supported yet",
                          def->name);
    if (!mesh) return oari_error(OAR_ERR_INVALID, "%s: no dtensor input", def->name);
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

    static _Thread_local oar_placement in_p[OARI_MAX_IN][OAR_MESH_MAX_DIMS];
    static _Thread_local oari_shard_plan plan;
    for (int i = 0; i < n_in; i++)
        for (int d = 0; d < mesh->ndim; d++)
            in_p[i][d] = in[i] && in[i]->dist ? in[i]->dist->p[d] : oar_replicate();
    plan.local_attrs = false;
    int has_rule = oari_shard_rule(op, def, n_in, in, in_p, attrs, c.out, mesh, &plan);
    if (has_rule < 0) return OAR_ERR_INVALID;
    if (!has_rule) {
        __atomic_add_fetch(&fallbacks, 1, __ATOMIC_RELAXED);
        for (int i = 0; i < n_in; i++)
            for (int d = 0; d < mesh->ndim; d++) plan.in[i][d] = oar_replicate();
        for (int j = 0; j < def->n_out; j++)
            for (int d = 0; d < mesh->ndim; d++) plan.out[j][d] = oar_replicate();
    }

    oar_tensor *local[OARI_MAX_IN] = {0}, *lout[OARI_MAX_OUT] = {0};
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i]) continue;
        oar_tensor *src = in[i]->dist ? in[i]->dist->local : in[i];
        local[i] = oari_reshard_local(src, mesh, in[i]->ndim, in[i]->shape, in_p[i], plan.in[i]);
        if (!local[i]) st = OAR_ERR_INVALID;
    }
    /* a view needs a viewable shard: shards of permuted dtensors may not be */
    if (!st && op == OARI_OP_view && !oar_tensor_is_contiguous(local[0])) {
        oar_pool *p = oar_pool_push();
        oar_tensor *c = oari_pop_owned(p, oar_contiguous(local[0]));
        oar_tensor_release(local[0]);
        if (!(local[0] = c)) st = OAR_ERR_NOMEM;
    }
    if (!st) {
        oari_no_grad_push();
        st = oari_dispatch(op, n_in, local, plan.local_attrs ? &plan.attrs : attrs, lout);
        oari_no_grad_pop();
    }
    for (int j = 0; j < def->n_out && !st; j++) {
        out[j] = oari_dtensor_wrap(lout[j], mesh, plan.out[j], c.out[j].ndim, c.out[j].shape);
        if (!out[j]) st = OAR_ERR_NOMEM;
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

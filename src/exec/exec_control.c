/* Control nodes in the executor (ir.h): a cond node runs the sub-graph of
 * the branch its predicate picks, a while node runs its cond and body
 * sub-graphs until the predicate is false, each through an executor of its
 * own (made on first use, planned per input shape like any executor), and
 * copies the results into the node's planned output buffers. Errors are
 * eager oar_while_loop's (iteration, variable, shapes; max_iters). */
#include "exec.h"

#include <string.h>

struct oari_ctrl_exec {
    oar_executor *ex[2];      /* of sub[0] and sub[1] */
};

int oari_exec_control_shapes(const oar_graph *g, const oari_gnode *n, const int64_t *sym_vals, oar_tensor **sym) {
    for (int j = 0; j < n->n_out; j++) {
        const oari_gvalue *v = &g->values[n->out[j]];
        int64_t shape[OAR_MAX_DIMS];
        for (int d = 0; d < v->ndim; d++) shape[d] = v->sym[d] >= 0 ? v->smul[d] * sym_vals[v->sym[d]] : v->shape[d];
        if (!(sym[n->out[j]] = oari_tensor_make(NULL, v->dtype, v->ndim, shape, NULL, 0))) return oari_fail_status();
    }
    return 0;
}

void oari_exec_control_free(oari_ctrl_exec *s) {
    if (!s) return;
    oar_executor_free(s->ex[0]);
    oar_executor_free(s->ex[1]);
    oari_free(s, sizeof *s);
}

static bool same_shape(const oar_tensor *a, const oar_tensor *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* Runs sub-graph executor ex; errors name the node and the sub-graph. */
static int run_sub(oar_executor *ex, int node, const char *name, const char *label, oar_tensor *const *in,
                   oar_tensor **res) {
    int st = oar_executor_run(ex, in, res);
    if (st) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        return oari_error(st, "executor: node %d (%s), %s: %s", node, name, label, msg);
    }
    return 0;
}

static bool truth(oar_tensor *p) {
    if (p->storage->device != oari_device_cpu()) return oar_tensor_item(p) != 0; /* devices: read back */
    return oari_load_f64(oar_tensor_data(p), p->dtype) != 0;
}

int oari_exec_control(oari_ctrl_exec **state, const oari_gnode *n, int node, oar_tensor *const *in,
                      oar_tensor *const *out) {
    bool loop = n->op == OARI_OP_WHILE;
    const char *name = oari_gnode_def(n)->name;
    oari_ctrl_exec *s = *state;
    if (!s) {
        if (!(s = oari_calloc(1, sizeof *s))) return oari_fail_status();
        *state = s;
    }
    for (int k = 0; k < 2; k++)
        if (!s->ex[k] && !(s->ex[k] = oar_executor_new(n->sub[k]))) return oari_fail_status();
    oar_tensor *res[OARI_GMAX_OUT];
    char s1[200], s2[200];
    int st = 0;
    if (!loop) {
        bool t = truth(in[0]);
        if ((st = run_sub(s->ex[t ? 0 : 1], node, name, t ? "then branch" : "else branch", in + 1, res))) return st;
        for (int j = 0; j < n->n_out && !st; j++) {
            if (!same_shape(res[j], out[j]))
                return oari_error(OAR_ERR_INVALID, "executor: node %d (cond): the %s branch gives output %d "
                                  "as %s %s; the graph plans %s %s", node, t ? "then" : "else", j,
                                  oar_dtype_name(res[j]->dtype), oari_shape_str(s1, res[j]->ndim, res[j]->shape),
                                  oar_dtype_name(out[j]->dtype), oari_shape_str(s2, out[j]->ndim, out[j]->shape));
            st = oari_exec_copy(out[j], res[j]);
        }
        return st;
    }
    /* cur: the loop variables (the inputs, then the outputs once the body
     * ran), then the captured values */
    int nv = n->n_out;
    int64_t max_iters = n->attrs.i[0];
    oar_tensor *cur[OARI_MAX_IN];
    memcpy(cur, in, (size_t)n->n_in * sizeof *cur);
    int64_t iter = 0;
    for (;; iter++) {
        oar_tensor *p;
        if ((st = run_sub(s->ex[0], node, name, "cond", cur, &p))) return st;
        if (!truth(p)) break;
        if (max_iters >= 0 && iter >= max_iters)
            return oari_error(OAR_ERR_INVALID, "executor: node %d (while): while_loop: still running after "
                              "max_iters = %lld iterations", node, (long long)max_iters);
        if ((st = run_sub(s->ex[1], node, name, "body", cur, res))) return st;
        for (int j = 0; j < nv; j++)
            if (!same_shape(res[j], out[j]))
                return oari_error(OAR_ERR_INVALID, "executor: node %d (while): while_loop: iteration %lld "
                                  "changes loop variable %d from %s %s to %s %s; loop variables keep their "
                                  "dtype and shape", node, (long long)iter, j,
                                  oar_dtype_name(out[j]->dtype), oari_shape_str(s1, out[j]->ndim, out[j]->shape),
                                  oar_dtype_name(res[j]->dtype), oari_shape_str(s2, res[j]->ndim, res[j]->shape));
        for (int j = 0; j < nv && !st; j++) st = oari_exec_copy(out[j], res[j]);
        if (st) return st;
        memcpy(cur, out, (size_t)nv * sizeof *cur);
    }
    for (int j = 0; j < nv && !iter && !st; j++) st = oari_exec_copy(out[j], in[j]);
    return st;
}

/* Value-dependent control flow (include/oar/graph.h "control flow"):
 * oar_cond and oar_while_loop run their callbacks on real values. While
 * tracing, a traced predicate (cond) or loop variable (while) makes a
 * control node instead (ir.h): each callback is traced by a nested tracer
 * into a sub-graph whose inputs are the operands and the outer values it
 * reads (captures), so a trace never bakes in one branch or one trip
 * count. The executor runs the nodes in exec_control.c. */
#include "ir.h"

#include <string.h>


/* ---- tracing into sub-graphs ---------------------------------------------------- */

enum { MAX_CTRL_OUT = OARI_GMAX_OUT };

/* One traced callback: its sub-graph and the outer values it captured. */
typedef struct branch {
    oar_graph *g;
    int n_caps;
    int *caps;                /* outer value ids, in the order of the inputs after the operands */
    int *inner;               /* the sub-graph inputs standing for them */
} branch;

static void branch_free(branch *b) {
    oar_graph_free(b->g);
    oari_free(b->caps, (size_t)(b->n_caps ? b->n_caps : 1) * sizeof *b->caps);
    oari_free(b->inner, (size_t)(b->n_caps ? b->n_caps : 1) * sizeof *b->inner);
    memset(b, 0, sizeof *b);
}

/* Traces fn(ctx, n_in operands) into b->g: inputs in0.. standing for the
 * outer values ids[] (metas as recorded there), outputs out0..; n_out
 * results. `what` names the callback in errors. */
static int trace_branch(const char *what, oar_fn fn, void *ctx, int n_in, const int *ids, int n_out,
                        branch *b) {
    oar_graph *outer = oari_trace_graph();
    memset(b, 0, sizeof *b);
    if (!(b->g = oari_graph_new_sub(outer))) return oari_fail_status();
    oar_tensor *sym[OARI_MAX_IN] = {0}, *res[MAX_CTRL_OUT] = {0};
    int st = 0;
    void *tr = oari_trace_push(b->g);
    if (!tr) st = oari_fail_status();
    oar_graph *g = b->g;
    g->inputs = oari_calloc((size_t)(n_in ? n_in : 1), sizeof *g->inputs);
    g->cap_inputs = n_in ? n_in : 1;
    if (!g->inputs) st = oari_fail_status();
    for (int k = 0; k < n_in && !st; k++) {
        const oari_gvalue ov = outer->values[ids[k]];
        int v = oari_graph_add_value(g, OARI_V_INPUT, ov.dtype, ov.ndim, ov.shape);
        char buf[32];
        snprintf(buf, sizeof buf, "in%d", k);
        if (v < 0 || !(g->values[v].name = oari_strdup(buf)) ||
            !(sym[k] = oari_graph_symbolic(&g->values[v]))) {
            st = oari_fail_status();
            break;
        }
        memcpy(g->values[v].sym, ov.sym, sizeof ov.sym);
        memcpy(g->values[v].smul, ov.smul, sizeof ov.smul);
        g->inputs[g->n_inputs++] = v;
        oari_trace_bind(sym[k], v);
    }
    oar_pool *pool = st ? NULL : oar_pool_push();
    if (!st && (st = fn(ctx, n_in, sym, n_out, res)) && !oari_error_pending())
        oari_error(st, "%s failed while traced", what);
    if (!st && (g->outputs = oari_calloc((size_t)n_out, sizeof *g->outputs)) &&
        (g->output_names = oari_calloc((size_t)n_out, sizeof *g->output_names)))
        g->n_outputs = n_out;
    else if (!st)
        st = oari_fail_status();
    for (int j = 0; j < n_out && !st; j++) {
        char buf[32];
        snprintf(buf, sizeof buf, "out%d", j);
        if (!res[j]) /* an op that failed inside keeps its message */
            st = oari_error_pending() ? OAR_ERR_INVALID : oari_error(OAR_ERR_INVALID, "%s left output %d NULL", what, j);
        else if ((g->outputs[j] = oari_trace_value_of(res[j])) < 0)
            st = oari_fail_status();
        else if (!(g->output_names[j] = oari_strdup(buf)))
            st = oari_fail_status();
    }
    if (!st) { /* keep the captures: the sub-graph's inputs after the operands */
        const int *co, *ci;
        int nc = oari_trace_captures(tr, &co, &ci);
        b->caps = oari_malloc((size_t)(nc ? nc : 1) * sizeof *b->caps);
        b->inner = oari_malloc((size_t)(nc ? nc : 1) * sizeof *b->inner);
        if (b->caps && b->inner) {
            if (nc) memcpy(b->caps, co, (size_t)nc * sizeof *co);
            if (nc) memcpy(b->inner, ci, (size_t)nc * sizeof *ci);
        } else {
            st = oari_fail_status();
        }
        b->n_caps = nc; /* sizes for branch_free */
    }
    if (pool) oar_pool_pop(pool);
    oari_trace_pop(tr);
    for (int k = 0; k < n_in; k++) oar_tensor_release(sym[k]);
    if (st) branch_free(b);
    return st;
}

/* Gives both sub-graphs the same inputs after the n_op operands: the union
 * of their captures (u[0..*n_u-1], outer ids); a capture one of them lacks
 * becomes an unused input. */
static int unify_captures(branch *a, branch *b, int n_op, int *u, int *n_u, int max_u) {
    int n = 0;
    branch *br[2] = {a, b};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < br[s]->n_caps; k++) {
            bool seen = false;
            for (int m = 0; m < n && !seen; m++) seen = u[m] == br[s]->caps[k];
            if (seen) continue;
            if (n == max_u)
                return oari_error(OAR_ERR_INVALID, "trace: a control-flow node reads more than %d values "
                                  "from outside its branches", max_u);
            u[n++] = br[s]->caps[k];
        }
    oar_graph *outer = oari_trace_graph();
    for (int s = 0; s < 2; s++) {
        oar_graph *g = br[s]->g;
        int *ins = oari_malloc((size_t)(n_op + n ? n_op + n : 1) * sizeof *ins);
        if (!ins) return oari_fail_status();
        memcpy(ins, g->inputs, (size_t)n_op * sizeof *ins);
        for (int m = 0; m < n; m++) {
            int iv = -1;
            for (int k = 0; k < br[s]->n_caps && iv < 0; k++)
                if (br[s]->caps[k] == u[m]) iv = br[s]->inner[k];
            if (iv < 0) { /* unused here: a plain input of the captured value's meta */
                const oari_gvalue ov = outer->values[u[m]];
                if ((iv = oari_graph_add_value(g, OARI_V_INPUT, ov.dtype, ov.ndim, ov.shape)) < 0) {
                    oari_free(ins, (size_t)(n_op + n ? n_op + n : 1) * sizeof *ins);
                    return oari_fail_status();
                }
                memcpy(g->values[iv].sym, ov.sym, sizeof ov.sym);
                memcpy(g->values[iv].smul, ov.smul, sizeof ov.smul);
            }
            ins[n_op + m] = iv;
            char buf[32]; /* one name per position in both sub-graphs */
            snprintf(buf, sizeof buf, "cap%d", m);
            char *nm = oari_strdup(buf);
            if (!nm) {
                oari_free(ins, (size_t)(n_op + n ? n_op + n : 1) * sizeof *ins);
                return oari_fail_status();
            }
            oari_strfree(g->values[iv].name);
            g->values[iv].name = nm;
        }
        oari_free(g->inputs, (size_t)g->cap_inputs * sizeof *g->inputs);
        g->inputs = ins;
        g->n_inputs = g->cap_inputs = n_op + n;
        if (!g->cap_inputs) g->cap_inputs = 1;
    }
    *n_u = n;
    return 0;
}

/* Appends the control node (inputs `lead` then the captures u) owning a and
 * b, with outputs shaped as a's outputs from `first_out`; out[] get
 * symbolic tensors for them (pool rule). */
static int add_ctrl_node(oari_op op, const oari_attrs *attrs, int n_lead, const int *lead, int n_u,
                         const int *u, branch *a, branch *b, int first_out, int n_out, oar_tensor **out) {
    oar_graph *g = oari_trace_graph();
    int ins[OARI_MAX_IN];
    oari_meta m[MAX_CTRL_OUT];
    if (n_lead + n_u > OARI_MAX_IN)
        return oari_error(OAR_ERR_INVALID, "trace: a control-flow node with %d inputs (at most %d)",
                          n_lead + n_u, OARI_MAX_IN);
    memcpy(ins, lead, (size_t)n_lead * sizeof *ins);
    if (n_u) memcpy(ins + n_lead, u, (size_t)n_u * sizeof *ins);
    for (int j = 0; j < n_out; j++) {
        const oari_gvalue *v = &a->g->values[a->g->outputs[first_out + j]];
        m[j].dtype = v->dtype;
        m[j].ndim = v->ndim;
        memcpy(m[j].shape, v->shape, sizeof v->shape);
    }
    int ni = oari_graph_add_node(g, op, attrs, n_lead + n_u, ins, n_out, m);
    if (ni < 0) return oari_fail_status();
    oari_gnode *n = &g->nodes[ni];
    n->sub[0] = a->g;
    n->sub[1] = b->g;
    a->g = b->g = NULL; /* owned by the node now */
    for (int j = 0; j < n_out; j++) {
        oar_tensor *t = oari_graph_symbolic(&g->values[n->out[j]]);
        if (t) oari_trace_bind(t, n->out[j]);
        if (!(out[j] = oari_pool_adopt(t))) {
            for (int k = 0; k < j; k++) out[k] = NULL;
            return oari_fail_status();
        }
    }
    return 0;
}

static bool same_meta_v(const oari_gvalue *a, const oari_gvalue *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* oar_cond on a traced predicate: a cond node. */
static int trace_cond(oar_tensor *pred, oar_fn then_fn, oar_fn else_fn, void *ctx, int n_in,
                      oar_tensor *const *in, int n_out, oar_tensor **out) {
    char s1[200], s2[200];
    if (n_in > OARI_MAX_IN - 1 || n_out > MAX_CTRL_OUT)
        return oari_error(OAR_ERR_INVALID, "cond: traced with %d inputs and %d outputs (at most %d and %d)",
                          n_in, n_out, OARI_MAX_IN - 1, MAX_CTRL_OUT);
    if (pred->numel != 1 || oar_dtype_is_complex(pred->dtype))
        return oari_error(OAR_ERR_INVALID, "cond: the predicate must be one real element, got %s %s",
                          oar_dtype_name(pred->dtype), oari_shape_str(s1, pred->ndim, pred->shape));
    int lead[OARI_MAX_IN], u[OARI_MAX_IN], n_u = 0, st = 0;
    if ((lead[0] = oari_trace_value_of(pred)) < 0) return oari_fail_status();
    for (int k = 0; k < n_in; k++) {
        if (!in[k]) return oari_error(OAR_ERR_INVALID, "cond: input %d is NULL", k);
        if ((lead[1 + k] = oari_trace_value_of(in[k])) < 0)
            return oari_fail_status();
    }
    branch a = {0}, b = {0};
    if ((st = trace_branch("cond: the then branch", then_fn, ctx, n_in, lead + 1, n_out, &a))) return st;
    if ((st = trace_branch("cond: the else branch", else_fn, ctx, n_in, lead + 1, n_out, &b))) {
        branch_free(&a);
        return st;
    }
    for (int j = 0; j < n_out && !st; j++) {
        const oari_gvalue *x = &a.g->values[a.g->outputs[j]], *y = &b.g->values[b.g->outputs[j]];
        if (!same_meta_v(x, y))
            st = oari_error(OAR_ERR_INVALID, "cond: output %d is %s %s in the then branch but %s %s in the "
                            "else branch; with a traced predicate both branches must agree", j,
                            oar_dtype_name(x->dtype), oari_shape_str(s1, x->ndim, x->shape),
                            oar_dtype_name(y->dtype), oari_shape_str(s2, y->ndim, y->shape));
    }
    if (!st) st = unify_captures(&a, &b, n_in, u, &n_u, OARI_MAX_IN - 1 - n_in);
    if (!st) st = add_ctrl_node(OARI_OP_COND, NULL, 1 + n_in, lead, n_u, u, &a, &b, 0, n_out, out);
    branch_free(&a);
    branch_free(&b);
    return st;
}

/* oar_while_loop on traced loop variables: a while node. */
static int trace_while(oar_fn cond_fn, oar_fn body_fn, void *ctx, int n_vars, oar_tensor *const *init,
                       int64_t max_iters, oar_tensor **out) {
    char s1[200], s2[200];
    if (n_vars > MAX_CTRL_OUT)
        return oari_error(OAR_ERR_INVALID, "while_loop: traced with %d loop variables (at most %d)", n_vars,
                          MAX_CTRL_OUT);
    int lead[MAX_CTRL_OUT], u[OARI_MAX_IN], n_u = 0, st = 0;
    for (int j = 0; j < n_vars; j++)
        if ((lead[j] = oari_trace_value_of(init[j])) < 0)
            return oari_fail_status();
    branch c = {0}, b = {0};
    if ((st = trace_branch("while_loop: cond_fn", cond_fn, ctx, n_vars, lead, 1, &c))) return st;
    const oari_gvalue *p = &c.g->values[c.g->outputs[0]];
    int64_t pn = 1;
    for (int d = 0; d < p->ndim; d++) pn *= p->shape[d];
    if (pn != 1 || oar_dtype_is_complex(p->dtype))
        st = oari_error(OAR_ERR_INVALID, "while_loop: the predicate must be one real element, got %s %s",
                        oar_dtype_name(p->dtype), oari_shape_str(s1, p->ndim, p->shape));
    if (!st) st = trace_branch("while_loop: body_fn", body_fn, ctx, n_vars, lead, n_vars, &b);
    oar_graph *g = oari_trace_graph();
    for (int j = 0; j < n_vars && !st; j++) {
        const oari_gvalue *x = &g->values[lead[j]], *y = &b.g->values[b.g->outputs[j]];
        if (!same_meta_v(x, y))
            st = oari_error(OAR_ERR_INVALID, "while_loop: the traced body changes loop variable %d from %s %s "
                            "to %s %s; loop variables keep their dtype and shape", j,
                            oar_dtype_name(x->dtype), oari_shape_str(s1, x->ndim, x->shape),
                            oar_dtype_name(y->dtype), oari_shape_str(s2, y->ndim, y->shape));
    }
    if (!st) st = unify_captures(&c, &b, n_vars, u, &n_u, OARI_MAX_IN - n_vars);
    oari_attrs at = {.ni = 1, .i = {max_iters < 0 ? -1 : max_iters}};
    /* the node's outputs are shaped as the body's */
    if (!st) st = add_ctrl_node(OARI_OP_WHILE, &at, n_vars, lead, n_u, u, &b, &c, 0, n_vars, out);
    if (!st) { /* add_ctrl_node stored (body, cond): put them in node order (cond, body) */
        oari_gnode *n = &g->nodes[g->n_nodes - 1];
        oar_graph *t = n->sub[0];
        n->sub[0] = n->sub[1];
        n->sub[1] = t;
    }
    branch_free(&c);
    branch_free(&b);
    return st;
}

/* ---- gradients of cond nodes (backward.c) --------------------------------------- */

/* What a gradient branch reads: the branch sub-graphs, then its inputs:
 * the n_ops sub-graph inputs (operands and captures) followed by one
 * gradient per output that has one (gout_of[]: which output); its
 * outputs: the gradients of the sub-graph inputs need[0..n_need-1]. */
typedef struct cond_grad {
    const oar_graph *sub[2];
    int n_ops, n_gout, n_need;
    int gout_of[OARI_GMAX_OUT];
    int need[MAX_CTRL_OUT];
} cond_grad;

static bool differentiable(oar_dtype d) { return oar_dtype_is_float(d) || oar_dtype_is_complex(d); }

static int replay_sub(const oar_graph *S, oar_tensor *const *in, oar_tensor **vals, oar_tensor *const *seeds,
                      int n_need, const int *need, oar_tensor **grad);

/* Replaying a control node nested in S: oar_cond / oar_while_loop again,
 * with callbacks replaying its sub-graphs (the loop's captures through ctx). */
typedef struct replay_ctx {
    const oari_gnode *n;
    oar_tensor *const *caps;
} replay_ctx;

static int replay_then(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    return replay_sub(((replay_ctx *)ctx)->n->sub[0], in, out, NULL, 0, NULL, NULL);
}

static int replay_else(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    return replay_sub(((replay_ctx *)ctx)->n->sub[1], in, out, NULL, 0, NULL, NULL);
}

static int replay_loop_part(const replay_ctx *rc, int part, oar_tensor *const *vars, oar_tensor **out) {
    const oari_gnode *n = rc->n;
    oar_tensor *ins[OARI_MAX_IN];
    memcpy(ins, vars, (size_t)n->n_out * sizeof *ins);
    if (n->n_in > n->n_out) memcpy(ins + n->n_out, rc->caps, (size_t)(n->n_in - n->n_out) * sizeof *ins);
    return replay_sub(n->sub[part], ins, out, NULL, 0, NULL, NULL);
}

static int replay_wcond(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    return replay_loop_part(ctx, 0, in, out);
}

static int replay_wbody(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    return replay_loop_part(ctx, 1, in, out);
}

/* o[] get n's results (pool-owned). */
static int replay_ctrl(const oari_gnode *n, oar_tensor *const *ins, oar_tensor **o) {
    replay_ctx rc = {.n = n, .caps = ins + n->n_out};
    if (n->op == OARI_OP_COND) return oar_cond(ins[0], replay_then, replay_else, &rc, n->n_in - 1, ins + 1, n->n_out, o);
    return oar_while_loop(replay_wcond, replay_wbody, &rc, n->n_out, ins, n->attrs.i[0], o);
}

/* Replays sub-graph S on in[] (one per S input) through dispatch, so its
 * nodes trace into the graph being built. vals (optional) get its outputs'
 * values. With n_need > 0 it then runs the gradient rules backwards from
 * seeds[j] (output j's gradient; NULL: none) and sets grad[m] to the
 * gradient of input need[m] (zeros where independent). Results pool-owned. */
static int replay_sub(const oar_graph *S, oar_tensor *const *in, oar_tensor **vals, oar_tensor *const *seeds,
                      int n_need, const int *need, oar_tensor **grad) {
    int nv = S->n_values, st = 0;
    size_t nb = (size_t)(nv ? nv : 1);
    oar_tensor **t = oari_calloc(nb, sizeof *t), **gr = oari_calloc(nb, sizeof *gr);
    bool *req = oari_calloc(nb, sizeof *req);
    if (!t || !gr || !req) st = oari_fail_status();
    for (int k = 0; k < S->n_inputs && !st; k++) t[S->inputs[k]] = oar_tensor_retain(in[k]);
    for (int m = 0; m < n_need && !st; m++) req[S->inputs[need[m]]] = true;
    for (int i = 0; i < S->n_nodes && !st; i++) {
        const oari_gnode *n = &S->nodes[i];
        if (n->dead) continue;
        oar_tensor *ins[OARI_MAX_IN], *o[OARI_GMAX_OUT] = {0};
        for (int k = 0; k < n->n_in; k++) ins[k] = n->in[k] >= 0 ? t[n->in[k]] : NULL;
        if (oari_is_ctrl(n->op)) { /* nested control flow: its results retained like dispatch's */
            if ((st = replay_ctrl(n, ins, o))) break;
            for (int j = 0; j < n->n_out; j++) oar_tensor_retain(o[j]);
        } else if ((st = oari_dispatch(n->op, n->n_in, ins, &n->attrs, o))) {
            break;
        }
        bool r = false; /* which values need a gradient, as append_backward decides */
        for (int k = 0; k < n->n_in; k++) r = r || (n->in[k] >= 0 && req[n->in[k]]);
        if (oari_gnode_def(n)->flags & OARI_F_NONDIFF) r = false;
        for (int j = 0; j < n->n_out; j++) {
            t[n->out[j]] = o[j];
            req[n->out[j]] = r && differentiable(S->values[n->out[j]].dtype);
        }
    }
    for (int j = 0; vals && j < S->n_outputs && !st; j++)
        if (!(vals[j] = oari_pool_adopt(oar_tensor_retain(t[S->outputs[j]])))) st = oari_fail_status();
    for (int j = 0; n_need && j < S->n_outputs && !st; j++) {
        int v = S->outputs[j];
        if (seeds[j] && !(gr[v] = gr[v] ? oar_add(gr[v], seeds[j]) : seeds[j])) st = oari_fail_status();
    }
    if (!st && n_need) st = oari_graph_backward_nodes(S, S->n_nodes, req, t, gr, NULL);
    for (int m = 0; m < n_need && !st; m++) {
        int v = S->inputs[need[m]];
        if (!(grad[m] = gr[v] ? gr[v] : oar_mul_scalar(in[need[m]], 0)))
            st = oari_fail_status();
    }
    for (int v = 0; t && v < nv; v++) oar_tensor_release(t[v]);
    oari_free(t, nb * sizeof *t);
    oari_free(gr, nb * sizeof *gr);
    oari_free(req, nb * sizeof *req);
    return st;
}

/* The vjp of branch S given the output gradients after the operands. */
static int grad_branch(const cond_grad *c, const oar_graph *S, oar_tensor *const *in, oar_tensor **out) {
    oar_tensor *seeds[OARI_GMAX_OUT] = {0};
    for (int g = 0; g < c->n_gout; g++) seeds[c->gout_of[g]] = in[c->n_ops + g];
    return replay_sub(S, in, NULL, seeds, c->n_need, c->need, out);
}

static int then_grad(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    const cond_grad *c = ctx;
    return grad_branch(c, c->sub[0], in, out);
}

static int else_grad(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    const cond_grad *c = ctx;
    return grad_branch(c, c->sub[1], in, out);
}

int oari_cond_grad(const oari_gnode *n, oar_tensor *const *in, oar_tensor *const *gout, const bool *needs,
                   oar_tensor **gin) {
    cond_grad c = {.sub = {n->sub[0], n->sub[1]}, .n_ops = n->n_in - 1};
    oar_tensor *ops[OARI_MAX_IN], *res[MAX_CTRL_OUT];
    for (int k = 0; k < c.n_ops; k++) ops[k] = in[1 + k];
    for (int j = 0; j < n->n_out; j++) {
        if (!gout[j]) continue;
        if (c.n_ops + c.n_gout == OARI_MAX_IN - 1)
            return oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: the gradient of a cond node needs more "
                              "than %d inputs", OARI_MAX_IN - 1);
        ops[c.n_ops + c.n_gout] = gout[j];
        c.gout_of[c.n_gout++] = j;
    }
    for (int k = 0; k < c.n_ops; k++) {
        if (!needs[1 + k]) continue;
        if (c.n_need == MAX_CTRL_OUT)
            return oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: a cond node with more than %d inputs "
                              "needing a gradient", MAX_CTRL_OUT);
        c.need[c.n_need++] = k;
    }
    if (!c.n_need) return 0;
    int st = oar_cond(in[0], then_grad, else_grad, &c, c.n_ops + c.n_gout, ops, c.n_need, res);
    for (int m = 0; m < c.n_need && !st; m++) gin[1 + c.need[m]] = res[m];
    return st;
}

/* ---- gradients of while nodes (backward.c) -------------------------------------- */

/* The gradient of a while node by recomputation, in graph nodes: a loop
 * counts the trips n (replaying cond and body), then a loop runs
 * j = n..1, each step replaying the body j-1 times from the initial values
 * (a nested loop) to get the variables it read, and pulling the variables'
 * gradients back through one body step (its vjp), summing the captures'.
 * O(n^2) body steps, constant memory; nothing is stored per iteration. */
typedef struct while_grad {
    const oar_graph *cond, *body;
    int n_vars, n_caps;
    oar_tensor *const *init;  /* the node's inputs: variables, then captures */
    oar_tensor *m;            /* set: the replay loop stops after m steps */
    int n_dvar, dvar[MAX_CTRL_OUT];   /* differentiable variables */
    int n_dcap, dcap[MAX_CTRL_OUT];   /* captures needing a gradient */
} while_grad;

static void sub_ins(const while_grad *w, oar_tensor *const *vars, oar_tensor **ins) {
    memcpy(ins, vars, (size_t)w->n_vars * sizeof *ins);
    if (w->n_caps) memcpy(ins + w->n_vars, w->init + w->n_vars, (size_t)w->n_caps * sizeof *ins);
}

/* replay loop over (variables..., i): the forward predicate (counting), or i < m */
static int replay_cond(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    const while_grad *w = ctx;
    if (w->m) {
        out[0] = oar_lt(in[w->n_vars], w->m);
        return out[0] ? 0 : OAR_ERR_INVALID;
    }
    oar_tensor *ins[OARI_MAX_IN];
    sub_ins(w, in, ins);
    return replay_sub(w->cond, ins, out, NULL, 0, NULL, NULL);
}

static int replay_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    const while_grad *w = ctx;
    oar_tensor *ins[OARI_MAX_IN];
    sub_ins(w, in, ins);
    int st = replay_sub(w->body, ins, out, NULL, 0, NULL, NULL);
    if (!st && !(out[w->n_vars] = oar_add_scalar(in[w->n_vars], 1))) st = OAR_ERR_INVALID;
    return st;
}

/* backward loop over (j, variable gradients..., capture gradients...) */
static int back_cond(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = oar_gt(in[0], oar_scalar(0));
    return out[0] ? 0 : OAR_ERR_INVALID;
}

static int back_body(void *ctx, int n_in, oar_tensor *const *in, int n_out, oar_tensor **out) {
    (void)n_in, (void)n_out;
    while_grad *w = ctx;
    int nv = w->n_vars, st;
    oar_tensor *m = oar_add_scalar(in[0], -1), *rv[MAX_CTRL_OUT + 1], *x[MAX_CTRL_OUT + 1];
    if (!m) return OAR_ERR_INVALID;
    memcpy(rv, w->init, (size_t)nv * sizeof *rv);
    rv[nv] = oar_scalar(0);
    oar_tensor *outer_m = w->m;
    w->m = m;
    st = oar_while_loop(replay_cond, replay_body, w, nv + 1, rv, -1, x); /* the variables step j-1 read */
    w->m = outer_m;
    if (st) return st;
    oar_tensor *ins[OARI_MAX_IN], *seeds[OARI_GMAX_OUT], *grad[2 * MAX_CTRL_OUT];
    int need[2 * MAX_CTRL_OUT], n_need = 0;
    sub_ins(w, x, ins);
    for (int k = 0; k < nv; k++) seeds[k] = in[1 + k];
    for (int k = 0; k < w->n_dvar; k++) need[n_need++] = w->dvar[k];
    for (int c = 0; c < w->n_dcap; c++) need[n_need++] = nv + w->dcap[c];
    if ((st = replay_sub(w->body, ins, NULL, seeds, n_need, need, grad))) return st;
    out[0] = m;
    for (int k = 0; k < nv; k++) out[1 + k] = in[1 + k]; /* not differentiable: zeros stay */
    for (int k = 0; k < w->n_dvar; k++) out[1 + w->dvar[k]] = grad[k];
    for (int c = 0; c < w->n_dcap; c++)
        if (!(out[1 + nv + c] = oar_add(in[1 + nv + c], grad[w->n_dvar + c]))) return OAR_ERR_INVALID;
    return 0;
}

int oari_while_grad(const oari_gnode *n, oar_tensor *const *in, oar_tensor *const *gout, const bool *needs,
                    oar_tensor **gin) {
    while_grad w = {.cond = n->sub[0], .body = n->sub[1], .n_vars = n->n_out, .n_caps = n->n_in - n->n_out,
                    .init = in};
    int nv = w.n_vars;
    for (int k = 0; k < nv; k++)
        if (differentiable(w.body->values[w.body->inputs[k]].dtype)) w.dvar[w.n_dvar++] = k;
    for (int c = 0; c < w.n_caps; c++)
        if (needs[nv + c] && w.n_dcap < MAX_CTRL_OUT) w.dcap[w.n_dcap++] = c;
        else if (needs[nv + c]) w.n_dcap = MAX_CTRL_OUT + 1;
    if (1 + nv + w.n_dcap > MAX_CTRL_OUT)
        return oari_error(OAR_ERR_UNSUPPORTED, "graph_backward: the gradient of a while node with %d variables "
                          "and %d captures needing gradients needs more than %d loop variables", nv, w.n_dcap,
                          MAX_CTRL_OUT);
    /* the trip count */
    oar_tensor *cv[MAX_CTRL_OUT + 1], *co[MAX_CTRL_OUT + 1];
    memcpy(cv, in, (size_t)nv * sizeof *cv);
    cv[nv] = oar_scalar(0);
    int st = oar_while_loop(replay_cond, replay_body, &w, nv + 1, cv, -1, co);
    if (st) return st;
    /* j = n..1 */
    oar_tensor *bv[MAX_CTRL_OUT], *bo[MAX_CTRL_OUT];
    bv[0] = co[nv];
    for (int k = 0; k < nv; k++)
        if (!(bv[1 + k] = gout[k] ? gout[k] : oar_mul_scalar(in[k], 0))) return OAR_ERR_INVALID;
    for (int c = 0; c < w.n_dcap; c++)
        if (!(bv[1 + nv + c] = oar_mul_scalar(in[nv + w.dcap[c]], 0))) return OAR_ERR_INVALID;
    if ((st = oar_while_loop(back_cond, back_body, &w, 1 + nv + w.n_dcap, bv, -1, bo))) return st;
    for (int k = 0; k < nv; k++)
        if (needs[k]) gin[k] = bo[1 + k];
    for (int c = 0; c < w.n_dcap; c++) gin[nv + w.dcap[c]] = bo[1 + nv + c];
    return 0;
}

/* ---- running eagerly ------------------------------------------------------------ */

/* The truth of a one-element predicate; 0/1, or a negative status. */
static int truth(const char *fn, const oar_tensor *p) {
    char sh[200];
    if (!p) /* a failed op made it: keep that op's message (invariant 4 of docs/architecture.md) */
        return oari_error_pending() ? OAR_ERR_INVALID : oari_error(OAR_ERR_INVALID, "%s: the predicate is NULL", fn);
    if (!p->storage)
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: the predicate is a symbolic value %s; while tracing, "
                          "a loop records a graph node only when a loop variable is traced: pass the "
                          "traced values the loop reads as loop variables", fn,
                          oari_trace_current ? "computed from a traced value the loop does not carry"
                                             : "outside any trace");
    if (p->numel != 1)
        return oari_error(OAR_ERR_INVALID, "%s: the predicate must have one element, got shape %s",
                          fn, oari_shape_str(sh, p->ndim, p->shape));
    if (oar_dtype_is_complex(p->dtype))
        return oari_error(OAR_ERR_INVALID, "%s: the predicate is complex (%s)", fn,
                          oar_dtype_name(p->dtype));
    double x = oar_tensor_item(p);
    return x != 0;
}

int oar_cond(oar_tensor *pred, oar_fn then_fn, oar_fn else_fn, void *ctx, int n_in,
             oar_tensor *const *in, int n_out, oar_tensor **out) {
    if (!then_fn || !else_fn)
        return oari_error(OAR_ERR_INVALID, "cond: then_fn or else_fn is NULL");
    if (n_in < 0 || (n_in && !in) || n_out < 1 || !out)
        return oari_error(OAR_ERR_INVALID, "cond: need inputs (%d given) and 1 or more outputs "
                          "(%d given) with an output array", n_in, n_out);
    for (int j = 0; j < n_out; j++) out[j] = NULL;
    if (pred && !pred->storage && oari_trace_is_traced(pred))
        return trace_cond(pred, then_fn, else_fn, ctx, n_in, in, n_out, out);
    int t = truth("cond", pred);
    if (t < 0) return t;
    const char *which = t ? "then" : "else";
    int st = (t ? then_fn : else_fn)(ctx, n_in, in, n_out, out);
    if (st && !oari_error_pending()) oari_error(st, "cond: the %s branch failed", which);
    for (int j = 0; j < n_out && !st; j++)
        if (!out[j]) st = oari_error(OAR_ERR_INVALID, "cond: the %s branch left output %d NULL", which, j);
    if (st)
        for (int j = 0; j < n_out; j++) out[j] = NULL;
    return st;
}

/* 0 if a and b have one dtype and shape; else an error naming the var. */
static int same_meta(int iter, int j, const oar_tensor *a, const oar_tensor *b) {
    char s1[200], s2[200];
    if (!b)
        return oari_error(OAR_ERR_INVALID, "while_loop: the body left loop variable %d NULL "
                          "(iteration %d)", j, iter);
    if (a->dtype == b->dtype && a->ndim == b->ndim &&
        !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape))
        return 0;
    return oari_error(OAR_ERR_INVALID, "while_loop: iteration %d changes loop variable %d from %s %s "
                      "to %s %s; loop variables keep their dtype and shape", iter, j,
                      oar_dtype_name(a->dtype), oari_shape_str(s1, a->ndim, a->shape),
                      oar_dtype_name(b->dtype), oari_shape_str(s2, b->ndim, b->shape));
}

static void release_all(int n, oar_tensor **t) {
    for (int j = 0; j < n; j++) {
        oar_tensor_release(t[j]);
        t[j] = NULL;
    }
}

int oar_while_loop(oar_fn cond_fn, oar_fn body_fn, void *ctx, int n_vars, oar_tensor *const *init,
                   int64_t max_iters, oar_tensor **out) {
    enum { MAXV = 64 };
    if (!cond_fn || !body_fn) return oari_error(OAR_ERR_INVALID, "while_loop: cond_fn or body_fn is NULL");
    if (n_vars < 1 || n_vars > MAXV || !init || !out)
        return oari_error(OAR_ERR_INVALID, "while_loop: need 1 to %d loop variables (got %d), "
                          "initial values and an output array", MAXV, n_vars);
    bool traced = false;
    for (int j = 0; j < n_vars; j++) {
        out[j] = NULL;
        if (!init[j]) return oari_error(OAR_ERR_INVALID, "while_loop: initial value %d is NULL", j);
        traced = traced || (!init[j]->storage && oari_trace_is_traced(init[j]));
    }
    if (traced) return trace_while(cond_fn, body_fn, ctx, n_vars, init, max_iters, out);
    /* cur holds one owned reference per variable; each step runs in its own
     * pool so an iteration's temporaries die with it */
    oar_tensor *cur[MAXV], *next[MAXV];
    for (int j = 0; j < n_vars; j++) cur[j] = oar_tensor_retain(init[j]);
    int st = 0;
    for (int64_t iter = 0;; iter++) {
        oar_pool *p = oar_pool_push();
        oar_tensor *pred = NULL;
        st = cond_fn(ctx, n_vars, cur, 1, &pred);
        if (st && !oari_error_pending()) oari_error(st, "while_loop: cond_fn failed (iteration %lld)",
                                                    (long long)iter);
        int t = st ? st : truth("while_loop", pred);
        if (t <= 0) {
            oar_pool_pop(p);
            st = t;
            break;
        }
        if (max_iters >= 0 && iter >= max_iters) {
            oar_pool_pop(p);
            st = oari_error(OAR_ERR_INVALID, "while_loop: still running after max_iters = %lld "
                            "iterations", (long long)max_iters);
            break;
        }
        for (int j = 0; j < n_vars; j++) next[j] = NULL;
        st = body_fn(ctx, n_vars, cur, n_vars, next);
        if (st && !oari_error_pending()) oari_error(st, "while_loop: body_fn failed (iteration %lld)",
                                                    (long long)iter);
        for (int j = 0; j < n_vars && !st; j++) st = same_meta((int)iter, j, cur[j], next[j]);
        for (int j = 0; j < n_vars; j++) next[j] = st ? NULL : oar_tensor_retain(next[j]);
        oar_pool_pop(p);
        if (st) break;
        release_all(n_vars, cur);
        memcpy(cur, next, (size_t)n_vars * sizeof *cur);
    }
    if (st) {
        release_all(n_vars, cur);
        return st;
    }
    for (int j = 0; j < n_vars; j++) {
        if (!(out[j] = oari_pool_adopt(cur[j]))) {
            for (int k = j + 1; k < n_vars; k++) oar_tensor_release(cur[k]);
            return oari_fail_status();
        }
    }
    return 0;
}

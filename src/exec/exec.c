/* The executor: runs a graph through the op kernels of the device its
 * inputs live on (the CPU, or a plugin's device: run_on_device).
 * For each new input shape (and device) it re-runs every shape rule (dynamic
 * dims), plans one arena by liveness (passes/memplan.c) and prepares every
 * kernel call; a run then points the calls at the caller's inputs (read in
 * place when they can be) and calls the kernels, allocating nothing. */
#include "exec.h"
#include "../ops/plan.h" /* the kernel-call planner, shared with eager dispatch */
#include "../profiler/hooks.h"

#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct exec_node {
    bool runs;                /* plan holds a kernel call (false: view, empty output, fused member) */
    oari_plan plan;           /* the call, as eager dispatch plans it (src/ops/plan.c) */
    oar_ktensor *kin;         /* its kernel tensors, pointed at in-place inputs on each run */
    oar_ktensor kout[OARI_MAX_OUT];
    oari_attrs attrs;         /* with symbolic sizes substituted */
    oar_kernel_fn copy_k;     /* in-place ops: copy in[0] into the output first */
    oar_kernel_call copy_call;
    oar_ktensor copy_io[2];
    int64_t rand_stride;      /* random ops: elements drawn per run (offset step) */
    oari_fused_fn fused;      /* a compiled kernel rooted here (src/compiler/) */
    void **fargs;             /* its output and input pointers, into the arena and constants */
    int n_fargs;
    void *dev_fn;             /* devices: a compiled kernel rooted here (fargs: its buffers) */
    int64_t *fscal;           /* its scalars: buffer offsets, symbol sizes, work-items */
    int n_fscal;
    size_t global;            /* its work-items */
} exec_node;

/* Everything prepared for one input-shape signature. */
typedef struct plan {
    bool planned;
    oar_device *dev;          /* where the inputs, the arena and every kernel are (the CPU or a plugin's) */
    oari_fusion *fusion;      /* the compiled kernels this plan runs (borrowed), or NULL */
    int ndims[64];
    int64_t shapes[64][OAR_MAX_DIMS];
    oar_tensor **vt;          /* per value: arena tensor, view or constant */
    exec_node *en;
    oar_tensor *arena;
    int64_t planned_bytes, unplanned_bytes;
    uint64_t used;            /* run count when last used (LRU) */
    int64_t sym_vals[OARI_MAX_SYMS]; /* the symbols' sizes: compiled kernels read them */
    /* inputs read in place, not copied into the arena (their slots are
     * planned empty): every pointer into them, pointed at the caller's
     * tensor on each run (a strided one is first copied into fallback[]) */
    bool in_place[64];
    struct input_arg {
        int node, kind, index, input; /* kind: IN_FUSED fargs[index], IN_KIN kin[index], IN_COPY copy_io[1] */
        int64_t byte_off;             /* from the input's first element */
    } *in_args;
    int n_in_args;
    oar_tensor *fallback[64];
    int8_t *out_mode;         /* per output: OUT_PLAIN, OUT_DONATED (in place) or OUT_COPIED */
    /* compiled kernels run later than their root (donation_in_place): run
     * just before node run_at[root] (n_nodes: after the last) */
    int *run_at;              /* per node; NULL when none is deferred */
    int *deferred, n_deferred; /* their roots, by run_at */
    bool written[64];         /* input i receives an output made in place */
} plan;

enum { OUT_PLAIN, OUT_DONATED, OUT_COPIED };

#define N_CACHED_PLANS 3      /* plans kept besides the current one */

struct oar_executor {
    const oar_graph *g;
    oari_fusion *fusion;      /* NULL: every node runs its library kernel */
    plan p;                   /* the current plan */
    plan cache[N_CACHED_PLANS];
    int64_t sym_vals[OARI_MAX_SYMS];
    int n_plans;
    uint64_t runs;
    double *node_ns;          /* optional (oari_executor_time_nodes): ns per node, summed over runs */
    int *donor;               /* per output: the input it is written into (oar_executor_donate), or -1 */
    bool *discard;            /* per output: not wanted (oar_executor_discard_output) */
    oari_ctrl_exec **ctrl;    /* per node, made on first use: control nodes' sub-graph executors (exec_control.c) */
    bool compile_wanted;      /* oar_executor_compile was called: compile for the device of each plan */
    oari_fusion *dev_fusion;  /* kernels rendered for dev_fusion->device (OpenCL or CUDA C), built there */
    oar_tensor **dev_const;   /* per value: its constant's copy on dev_const_on (plans share them) */
    oar_device *dev_const_on;
    int n_dev_const;          /* entries of dev_const */
    oar_device *dev_failed;   /* the device they failed to build on (said once; runs unfused) */
};

static void drop_plan(const oar_graph *g, plan *p);

oar_executor *oar_executor_new(const oar_graph *g) {
    if (!g) return oari_error(OAR_ERR_INVALID, "executor_new: graph is NULL"), NULL;
    if (g->n_inputs > 64)
        return oari_error(OAR_ERR_INVALID, "executor_new: %d inputs (at most 64)", g->n_inputs), NULL;
    oar_executor *ex = oari_calloc(1, sizeof *ex);
    if (!ex) return NULL;
    ex->g = g;
    size_t no = (size_t)(g->n_outputs ? g->n_outputs : 1);
    ex->donor = oari_malloc(no * sizeof *ex->donor);
    ex->discard = oari_calloc(no, sizeof *ex->discard);
    if (!ex->donor || !ex->discard) {
        oar_executor_free(ex);
        return NULL;
    }
    for (int j = 0; j < g->n_outputs; j++) ex->donor[j] = -1;
    drop_plan(g, &ex->p);
    for (int i = 0; i < N_CACHED_PLANS; i++) drop_plan(g, &ex->cache[i]);
    return ex;
}

static void drop_plan(const oar_graph *g, plan *p) {
    if (p->vt) {
        for (int v = 0; v < g->n_values; v++) oar_tensor_release(p->vt[v]);
        oari_free(p->vt, (size_t)(g->n_values ? g->n_values : 1) * sizeof *p->vt);
    }
    if (p->en) {
        for (int i = 0; i < g->n_nodes; i++) {
            oari_free(p->en[i].kin, (size_t)(g->nodes[i].n_in ? g->nodes[i].n_in : 1) * sizeof(oar_ktensor));
            oari_plan_clear(&p->en[i].plan);
            oari_free(p->en[i].fargs, (size_t)p->en[i].n_fargs * sizeof(void *));
            oari_free(p->en[i].fscal, (size_t)p->en[i].n_fscal * sizeof(int64_t));
        }
        oari_free(p->en, (size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *p->en);
    }
    oar_tensor_release(p->arena);
    oari_free(p->in_args, (size_t)p->n_in_args * sizeof *p->in_args);
    for (int i = 0; i < 64; i++) oar_tensor_release(p->fallback[i]);
    oari_free(p->out_mode, (size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *p->out_mode);
    if (p->run_at) oari_free(p->run_at, (size_t)g->n_nodes * sizeof *p->run_at);
    oari_free(p->deferred, (size_t)p->n_deferred * sizeof *p->deferred);
    memset(p, 0, sizeof *p);
    p->planned_bytes = p->unplanned_bytes = -1;
}

static void drop_dev_consts(oar_executor *ex) {
    for (int v = 0; v < ex->n_dev_const; v++) oar_tensor_release(ex->dev_const[v]);
    oari_free(ex->dev_const, (size_t)ex->n_dev_const * sizeof *ex->dev_const);
    ex->n_dev_const = 0;
    ex->dev_const = NULL;
    ex->dev_const_on = NULL;
}

void oar_executor_free(oar_executor *ex) {
    if (!ex) return;
    drop_plan(ex->g, &ex->p);
    for (int i = 0; i < N_CACHED_PLANS; i++) drop_plan(ex->g, &ex->cache[i]);
    oari_fusion_free(ex->fusion);
    oari_fusion_free(ex->dev_fusion);
    drop_dev_consts(ex);
    size_t no = (size_t)(ex->g->n_outputs ? ex->g->n_outputs : 1);
    oari_free(ex->donor, no * sizeof *ex->donor);
    oari_free(ex->discard, no * sizeof *ex->discard);
    for (int i = 0; ex->ctrl && i < ex->g->n_nodes; i++) oari_exec_control_free(ex->ctrl[i]);
    oari_free(ex->ctrl, (size_t)ex->g->n_nodes * sizeof *ex->ctrl);
    oari_free(ex, sizeof *ex);
}

int64_t oar_executor_planned_bytes(const oar_executor *ex) {
    return ex ? ex->p.planned_bytes : (oari_null_arg(__func__, "executor"), -1);
}
int64_t oar_executor_unplanned_bytes(const oar_executor *ex) {
    return ex ? ex->p.unplanned_bytes : (oari_null_arg(__func__, "executor"), -1);
}
int oar_executor_num_plans(const oar_executor *ex) {
    return ex ? ex->n_plans : (oari_null_arg(__func__, "executor"), -1);
}

static void drop_all_plans(oar_executor *ex);

int oar_executor_donate(oar_executor *ex, int input, int output) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_donate: executor is NULL");
    const oar_graph *g = ex->g;
    if (input < 0 || input >= g->n_inputs || output < 0 || output >= g->n_outputs)
        return oari_error(OAR_ERR_INVALID, "executor_donate: input %d or output %d out of range (%d inputs, "
                          "%d outputs)", input, output, g->n_inputs, g->n_outputs);
    const oari_gvalue *x = &g->values[g->inputs[input]], *o = &g->values[g->outputs[output]];
    if (ex->donor[output] >= 0 || ex->discard[output])
        return oari_error(OAR_ERR_INVALID, "executor_donate: output %d (%s) is already %s", output,
                          g->output_names[output], ex->discard[output] ? "discarded" : "donated");
    for (int j = 0; j < g->n_outputs; j++)
        if (ex->donor[j] == input)
            return oari_error(OAR_ERR_INVALID, "executor_donate: input %d (%s) already receives output %d",
                              input, x->name, j);
    bool same = x->dtype == o->dtype && x->ndim == o->ndim;
    for (int d = 0; d < x->ndim && same; d++)
        same = x->shape[d] == o->shape[d] && x->sym[d] == o->sym[d] && (x->sym[d] < 0 || x->smul[d] == o->smul[d]);
    if (!same) {
        char s1[200], s2[200];
        return oari_error(OAR_ERR_INVALID, "executor_donate: output %d (%s) is %s %s, input %d (%s) is %s %s; "
                          "they must agree (dynamic dims included)", output, g->output_names[output],
                          oar_dtype_name(o->dtype), oari_shape_str(s1, o->ndim, o->shape), input, x->name,
                          oar_dtype_name(x->dtype), oari_shape_str(s2, x->ndim, x->shape));
    }
    ex->donor[output] = input;
    drop_all_plans(ex);
    return 0;
}

int oar_executor_discard_output(oar_executor *ex, int output) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_discard_output: executor is NULL");
    if (output < 0 || output >= ex->g->n_outputs)
        return oari_error(OAR_ERR_INVALID, "executor_discard_output: output %d out of range (%d outputs)",
                          output, ex->g->n_outputs);
    if (ex->donor[output] >= 0)
        return oari_error(OAR_ERR_INVALID, "executor_discard_output: output %d (%s) is donated", output,
                          ex->g->output_names[output]);
    if (!ex->discard[output]) {
        ex->discard[output] = true;
        drop_all_plans(ex);
    }
    return 0;
}

int oar_executor_update_in_place(oar_executor *ex) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_update_in_place: executor is NULL");
    const oar_graph *g = ex->g;
    int donated = 0, st;
    for (int j = 0; j < g->n_outputs; j++) {
        const char *name = g->output_names[j];
        if (strncmp(name, "next:", 5) || ex->donor[j] >= 0) continue;
        for (int i = 0; i < g->n_inputs; i++) {
            if (strcmp(g->values[g->inputs[i]].name, name + 5)) continue;
            if ((st = oar_executor_donate(ex, i, j))) return st;
            donated++;
            for (int q = 0; q < g->n_outputs; q++)
                if (!strncmp(g->output_names[q], "grad:", 5) && !strcmp(g->output_names[q] + 5, name + 5) &&
                    (st = oar_executor_discard_output(ex, q)))
                    return st;
            break;
        }
    }
    return donated;
}

int oar_executor_donated_in_place(const oar_executor *ex, int output) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_donated_in_place: executor is NULL");
    if (output < 0 || output >= ex->g->n_outputs || ex->donor[output] < 0)
        return oari_error(OAR_ERR_INVALID, "executor_donated_in_place: output %d is not donated", output);
    if (!ex->p.planned) return oari_error(OAR_ERR_STATE, "executor_donated_in_place: no run yet");
    return ex->p.out_mode[output] == OUT_DONATED;
}

/* Binds the symbols from the input shapes; 0 or an error naming the input. */
static int bind_inputs(oar_executor *ex, oar_tensor *const *inputs) {
    const oar_graph *g = ex->g;
    bool bound[OARI_MAX_SYMS] = {0};
    /* devices: the plan runs where input 0 lives; every input must be there */
    oar_device *dev = g->n_inputs && inputs[0] && inputs[0]->storage ? inputs[0]->storage->device
                                                                     : oari_device_cpu();
    ex->p.dev = dev;
    for (int i = 0; i < g->n_inputs; i++) {
        const oari_gvalue *v = &g->values[g->inputs[i]];
        oar_tensor *t = inputs[i];
        char s1[200], s2[200];
        if (!t) return oari_error(OAR_ERR_INVALID, "executor: input %d (%s) is NULL", i, v->name);
        if (t->storage && t->storage->device != dev)
            return oari_error(OAR_ERR_INVALID, "executor: input %d (%s) is on %s, input 0 on %s; the inputs "
                              "of a run must be on one device (move them with oar_tensor_to)", i, v->name,
                              t->storage->device->name, dev->name);
        bool ok = t->dtype == v->dtype && t->ndim == v->ndim && t->storage;
        for (int d = 0; d < v->ndim && ok; d++) {
            int s = v->sym[d];
            int64_t m = v->smul[d] > 0 ? v->smul[d] : 1;
            if (s < 0) ok = t->shape[d] == v->shape[d];
            else if (t->shape[d] % m) ok = false;
            else if (!bound[s]) bound[s] = true, ex->sym_vals[s] = t->shape[d] / m;
            else ok = ex->sym_vals[s] * m == t->shape[d];
        }
        if (!ok) {
            int64_t want[OAR_MAX_DIMS];
            for (int d = 0; d < v->ndim; d++) want[d] = v->sym[d] >= 0 ? -1 : v->shape[d];
            return oari_error(OAR_ERR_INVALID, "executor: input %d (%s) is %s %s%s; the graph wants "
                              "%s %s (-1: dynamic; equal names must agree)", i, v->name,
                              oar_dtype_name(t->dtype), oari_shape_str(s1, t->ndim, t->shape),
                              t->storage ? "" : " (symbolic)", oar_dtype_name(v->dtype),
                              oari_shape_str(s2, v->ndim, want));
        }
    }
    for (int s = 0; s < g->n_syms; s++)
        if (!bound[s]) ex->sym_vals[s] = g->syms[s].trace_size;
    return 0;
}

/* Profiler span names of compiled kernels, "fused:<root op>": static, as
 * spans keep the pointer. */
static char fused_names[OARI_OP_COUNT][48];
static pthread_once_t fused_names_once = PTHREAD_ONCE_INIT;
static void make_fused_names(void) {
    for (int op = 0; op < OARI_OP_COUNT; op++)
        snprintf(fused_names[op], sizeof fused_names[op], "fused:%s", oari_op_name((oari_op)op));
}

/* Runs the compiled kernel rooted at node i, in node order or deferred (run_at). */
static void run_fused(oar_executor *ex, int i) {
    exec_node *e = &ex->p.en[i];
    int64_t prof_t0 = OARI_PROF_BEGIN();
    int64_t node_t0 = ex->node_ns ? oari_prof_now() : 0;
    e->fused(e->fargs, ex->p.sym_vals);
    OARI_PROF_END(OAR_PROFILER_OP, fused_names[ex->g->nodes[i].op], prof_t0, 1, &ex->p.vt[ex->g->nodes[i].out[0]]);
    if (node_t0) ex->node_ns[i] += (double)(oari_prof_now() - node_t0);
}

enum { OARI_GMAX_KERNEL_ARGS = 8 }; /* more arguments: not a small kernel worth prefetching for */

/* The compiled kernel that runs right after node i (its root), or -1:
 * the next deferred one due before node i + 1, else node i + 1's own. */
static int next_kernel(const oar_executor *ex, int i, int next_deferred) {
    if (next_deferred < ex->p.n_deferred && ex->p.run_at[ex->p.deferred[next_deferred]] == i + 1)
        return ex->p.deferred[next_deferred];
    bool in_order = i + 1 < ex->g->n_nodes && ex->p.en[i + 1].fused;
    return in_order && (!ex->p.run_at || ex->p.run_at[i + 1] == i + 1) ? i + 1 : -1;
}

/* The arguments of the compiled kernel rooted at node i, when all are small
 * (a [128] parameter's update), asked into the cache while the node before
 * it runs: such a kernel is a few loads from lines nothing has touched for
 * a while, and waited 0.3-0.5 us on them (BENCH_KERNELS in
 * bench_compiled_step: 1.0-1.3 us against 0.7 us for its two ops unfused).
 * The sizes are looked up here at each call: a version that kept them with
 * the plan measured worse (7-9 kernels over 5% against 0-1, alternating
 * builds), for a reason not found. */
static void prefetch_small_args(const oar_executor *ex, int i) {
    const exec_node *e = &ex->p.en[i];
    const oari_kernel *k = &ex->p.fusion->kernels[ex->p.fusion->kernel_of[i]];
    int64_t bytes[OARI_GMAX_KERNEL_ARGS];
    if (ex->p.dev != oari_device_cpu() || e->n_fargs > OARI_GMAX_KERNEL_ARGS) return;
    for (int a = 0; a < e->n_fargs; a++) {
        const oar_tensor *t = ex->p.vt[k->args[a]];
        if ((bytes[a] = t->numel * (int64_t)oar_dtype_size(t->dtype)) > 4096) return;
    }
    for (int a = 0; a < e->n_fargs; a++)
        for (int64_t b = 0; b < bytes[a]; b += 64) __builtin_prefetch((const char *)e->fargs[a] + b);
}

/* Compiled kernels (oar_executor_compile): node i is computed inside a
 * kernel (a member), is where that kernel runs (its root), or neither. */
static int kernel_of(const oar_executor *ex, int i) { return ex->p.fusion ? ex->p.fusion->kernel_of[i] : -1; }
static bool is_kernel_root(const oar_executor *ex, int i) {
    int k = kernel_of(ex, i);
    return k >= 0 && ex->p.fusion->kernels[k].root == i;
}
/* Where node i reads its inputs: at its kernel's root when fused, or
 * just before node run_at[root] when that kernel is deferred. */
static int reads_at(const oar_executor *ex, int i) {
    int k = kernel_of(ex, i);
    int r = k >= 0 ? ex->p.fusion->kernels[k].root : i;
    return k >= 0 && ex->p.run_at ? ex->p.run_at[r] : r;
}
/* A value that only exists inside a kernel (no buffer). */
static bool is_internal(const oar_executor *ex, int v) {
    const oari_gvalue *gv = &ex->g->values[v];
    return gv->kind == OARI_V_NODE && kernel_of(ex, gv->producer) >= 0 && !is_kernel_root(ex, gv->producer);
}

/* The compiled kernel rooted at node i: its argument pointers, after a
 * check that the shapes it was generated for (symbolic dims included)
 * are the planned ones. */
static int setup_fused(oar_executor *ex, int i, oar_tensor *const *sym) {
    const oari_kernel *k = &ex->p.fusion->kernels[ex->p.fusion->kernel_of[i]];
    exec_node *e = &ex->p.en[i];
    if (!(e->fargs = oari_calloc((size_t)k->n_args, sizeof *e->fargs))) return oari_fail_status();
    e->n_fargs = k->n_args;
    for (int a = 0; a < k->n_args; a++) {
        int v = k->args[a];
        const oari_gvalue *gv = &ex->g->values[v];
        bool ok = sym[v] && sym[v]->ndim == gv->ndim && ex->p.vt[v];
        for (int d = 0; d < gv->ndim && ok; d++)
            ok = sym[v]->shape[d] == (gv->sym[d] >= 0 ? gv->smul[d] * ex->sym_vals[gv->sym[d]] : gv->shape[d]);
        if (!ok) {
            char s1[200];
            return oari_error(OAR_ERR_STATE, "executor: compiled kernel %s was generated for value %d of "
                              "shape %s (traced) and cannot run this plan; run the graph uncompiled",
                              k->name, v, oari_shape_str(s1, gv->ndim, gv->shape));
        }
        e->fargs[a] = oar_tensor_data(ex->p.vt[v]);
    }
    if (ex->p.dev != oari_device_cpu()) { /* buffers, then offsets, symbols' sizes, work-items */
        const oar_graph *g = ex->g;
        if (!(e->fscal = oari_calloc((size_t)(k->n_args + g->n_syms + 1), sizeof *e->fscal))) return oari_fail_status();
        e->n_fscal = k->n_args + g->n_syms + 1;
        for (int a = 0; a < k->n_args; a++) {
            e->fargs[a] = ex->p.vt[k->args[a]]->storage->data;
            e->fscal[a] = ex->p.vt[k->args[a]]->offset;
        }
        for (int q = 0; q < g->n_syms; q++) e->fscal[k->n_args + q] = ex->sym_vals[q];
        const oar_tensor *r = sym[k->args[0]];
        int64_t n = k->flat ? r->numel : 1;
        for (int d = 0; d < r->ndim && !k->flat; d++)
            if (k->outer_mask & (1u << d)) n *= r->shape[d];
        e->fscal[e->n_fscal - 1] = n;
        e->global = (size_t)n;
        e->dev_fn = n && r->numel ? k->dev_fn : NULL;
        return 0;
    }
    e->fused = k->fn;
    return 0;
}

/* The f32 temporaries of a node run through an f32 kernel for lack of a
 * half one (the planner's VIA_F32 route): its planned arena slots, in the
 * order the planner asks for them. */
typedef struct arena_temps {
    oar_tensor *arena;
    const oari_membuf *bufs; /* the node's slots */
    int next;
} arena_temps;

static oar_tensor *arena_temp(void *ctx, const oar_tensor *like) {
    arena_temps *a = ctx;
    return oari_tensor_make(a->arena->storage, OAR_F32, like->ndim, like->shape, NULL,
                            a->bufs[a->next++].offset / 4);
}

enum { IN_FUSED, IN_KIN, IN_COPY, IN_KOUT };

/* Whether graph input i can be read in place: no graph output aliases it
 * (outputs are the arena's), and no op run in f32 for lack of a half
 * kernel reads it (its casts keep their own pointers). root[v]: the value
 * whose buffer v uses. */
static bool input_in_place(const oar_executor *ex, const int *root, const bool *emul, int i) {
    const oar_graph *g = ex->g;
    int v = g->inputs[i];
    for (int j = 0; j < g->n_outputs; j++)
        if (root[g->outputs[j]] == v) return false;
    for (int n = 0; n < g->n_nodes; n++) {
        if (!emul[n] && !oari_is_ctrl(g->nodes[n].op)) continue; /* control nodes read vt[] */
        for (int k = 0; k < g->nodes[n].n_in; k++)
            if (g->nodes[n].in[k] >= 0 && root[g->nodes[n].in[k]] == v) return false;
    }
    return true;
}

/* Whether node n, run alone, writes its output element by element from
 * the same element of its inputs of that shape: elementwise or broadcast,
 * no view, its output of `shape`. (A compiled kernel is so when flat.) */
static bool pointwise(const oar_graph *g, int n, oar_tensor *const *sym, const oar_tensor *shape) {
    const oari_gnode *nd = &g->nodes[n];
    const oari_op_def *def = oari_gnode_def(nd);
    const oar_tensor *o = sym[nd->out[0]];
    return (def->fusion == OARI_FUSE_ELEMWISE || def->fusion == OARI_FUSE_BROADCAST) &&
           !(def->flags & (OARI_F_INPLACE | OARI_F_VIEW)) && nd->n_out == 1 && o->ndim == shape->ndim &&
           !memcmp(o->shape, shape->shape, (size_t)o->ndim * sizeof(int64_t));
}

/* Whether compiled kernel K reads value x, if at all, only at the element
 * it writes (flat, or x a leaf in its same_index). */
static bool kernel_reads_at_output(const oari_kernel *K, int x) {
    for (int a = 1; a < K->n_args; a++)
        if (K->args[a] == x && !K->flat && !(a < 64 && (K->same_index >> a & 1))) return false;
    return true;
}

/* Whether compiled kernel k, making output o (donated to input x), may
 * run later than its root: no node reads o, and it reads no input but x
 * (so no other donation's order changes). */
static bool deferrable(const oar_executor *ex, const int *root, int o, int x, int k) {
    const oar_graph *g = ex->g;
    const oari_kernel *K = &ex->p.fusion->kernels[k];
    for (int n = 0; n < g->n_nodes; n++)
        for (int q = 0; q < g->nodes[n].n_in; q++)
            if (g->nodes[n].in[q] >= 0 && root[g->nodes[n].in[q]] == o) return false;
    for (int a = 1; a < K->n_args; a++) {
        int v = K->args[a];
        if (v != x && g->values[v].kind != OARI_V_CONST &&
            (root[v] < 0 || g->values[root[v]].kind != OARI_V_NODE))
            return false;
    }
    return true;
}

static bool donation_readers_ok(const oar_executor *ex, const int *root, const bool *emul, int o, int x, int k,
                                int p, int at);

/* Whether output j, donated to input i, can be computed straight into the
 * input's storage: a buffer of its own with the input's dtype and shape,
 * made by a pointwise kernel that reads the input (directly, not through a
 * view) only at the element it writes, after every other reader of the
 * input; no op run in f32 touches it and no other output or compiled
 * kernel argument is a view of it (their pointers could not follow). */
static bool donation_in_place(const oar_executor *ex, const int *root, const bool *emul, oar_tensor *const *sym,
                              int j, int i) {
    const oar_graph *g = ex->g;
    int o = g->outputs[j], x = g->inputs[i];
    if (!ex->p.in_place[i] || g->values[o].kind != OARI_V_NODE || root[o] != o) return false;
    for (int j2 = 0; j2 < g->n_outputs; j2++)
        if (j2 != j && root[g->outputs[j2]] == o) return false;
    int p = g->values[o].producer, at = reads_at(ex, p), k = kernel_of(ex, p);
    if (emul[p] || (k >= 0 ? !kernel_reads_at_output(ex->p.fusion->kernels + k, x) : !pointwise(g, p, sym, sym[o])))
        return false;
    /* a compiled kernel whose output nothing reads may run later, after the
     * last reader of the input: a layer norm's backward kernel runs at its
     * root, after the update of its weight that follows the weight's last
     * reader in node order */
    if (k >= 0 && ex->p.run_at && deferrable(ex, root, o, x, k)) {
        int last = -1;
        for (int n = 0; n < g->n_nodes; n++) {
            bool member = kernel_of(ex, n) == k;
            for (int q = 0; q < g->nodes[n].n_in && !member; q++)
                if (g->nodes[n].in[q] >= 0 && root[g->nodes[n].in[q]] == x && reads_at(ex, n) > last)
                    last = reads_at(ex, n);
        }
        if (last >= at) {
            if (!donation_readers_ok(ex, root, emul, o, x, k, p, last + 1)) return false;
            ex->p.run_at[p] = last + 1;
            return true;
        }
    }
    return donation_readers_ok(ex, root, emul, o, x, k, p, at);
}

/* The rest of donation_in_place, for output o made at `at`. */
static bool donation_readers_ok(const oar_executor *ex, const int *root, const bool *emul, int o, int x, int k,
                                int p, int at) {
    const oar_graph *g = ex->g;
    for (int n = 0; n < g->n_nodes; n++) {
        const oari_gnode *nd = &g->nodes[n];
        bool member = n == p || (k >= 0 && kernel_of(ex, n) == k);
        for (int q = 0; q < nd->n_in; q++) {
            int v = nd->in[q];
            if (v < 0) continue;
            if (root[v] == o && (emul[n] || v != o)) return false;
            if (root[v] != x) continue;
            if (member ? v != x : reads_at(ex, n) >= at) return false;
        }
    }
    return true;
}

/* Whether value v is an output the current plan makes in its donor input. */
static bool made_in_input(const oar_executor *ex, int v) {
    for (int j = 0; j < ex->g->n_outputs; j++)
        if (ex->g->outputs[j] == v && ex->p.out_mode[j] == OUT_DONATED) return true;
    return false;
}

/* Every pointer into value v's buffer, which stands for input i: kernel
 * arguments, library kernels' inputs (and output, for a donated output)
 * and in-place ops' copies. Counts them from *n on, and with `fill`
 * records them in in_args. */
static void record_pointers(oar_executor *ex, const int *root, int v, int i, bool fill, int *n) {
    const oar_graph *g = ex->g;
    const char *base = oar_tensor_data(ex->p.vt[v]);
    for (int nd = 0; nd < g->n_nodes; nd++) {
        const oari_gnode *node = &g->nodes[nd];
        exec_node *e = &ex->p.en[nd];
        if (e->fused) {
            const oari_kernel *k = &ex->p.fusion->kernels[ex->p.fusion->kernel_of[nd]];
            for (int a = 0; a < k->n_args; a++)
                if (k->args[a] == v) {
                    if (fill) ex->p.in_args[*n] = (struct input_arg){nd, IN_FUSED, a, i, 0};
                    (*n)++;
                }
            continue;
        }
        if (oari_is_ctrl(node->op)) continue; /* reads no input in place (input_in_place) */
        for (int q = 0; q < node->n_out && e->runs; q++)
            if (node->out[q] == v) { /* a donated output's writer */
                if (fill) ex->p.in_args[*n] = (struct input_arg){nd, IN_KOUT, q, i, 0};
                (*n)++;
            }
        bool inplace_op = oari_op_defs[node->op]->flags & OARI_F_INPLACE;
        if (e->runs)
            for (int k = 0; k < node->n_in; k++) {
                if (node->in[k] < 0 || root[node->in[k]] != v || e->kin[k].dtype < 0) continue;
                if (inplace_op && k == 0) continue; /* the kernel reads its output there */
                if (fill)
                    ex->p.in_args[*n] = (struct input_arg){nd, IN_KIN, k, i, (const char *)e->kin[k].data - base};
                (*n)++;
            }
        if (e->copy_k && node->in[0] >= 0 && root[node->in[0]] == v) {
            if (fill)
                ex->p.in_args[*n] = (struct input_arg){nd, IN_COPY, 1, i, (const char *)e->copy_io[1].data - base};
            (*n)++;
        }
    }
}

/* Records every pointer into an input read in place, and into each
 * output donated to it and made in place (after the kernels' calls are
 * prepared); 0 or OAR_ERR_NOMEM. */
static int record_input_readers(oar_executor *ex, const int *root) {
    const oar_graph *g = ex->g;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        int n = 0;
        for (int i = 0; i < g->n_inputs; i++) {
            if (!ex->p.in_place[i]) continue;
            record_pointers(ex, root, g->inputs[i], i, pass, &n);
            for (int j = 0; j < g->n_outputs; j++)
                if (ex->donor[j] == i && ex->p.out_mode[j] == OUT_DONATED)
                    record_pointers(ex, root, g->outputs[j], i, pass, &n);
        }
        if (!pass) {
            if (!n) return 0;
            if (!(ex->p.in_args = oari_calloc((size_t)n, sizeof *ex->p.in_args))) return oari_fail_status();
        }
        ex->p.n_in_args = n;
    }
    return 0;
}

/* Points every recorded reader of input i (and writer and reader of an
 * output donated to it) at base, its first element. */
static void point_input_readers(oar_executor *ex, int i, char *base) {
    for (int k = 0; k < ex->p.n_in_args; k++) {
        struct input_arg *a = &ex->p.in_args[k];
        if (a->input != i) continue;
        exec_node *e = &ex->p.en[a->node];
        if (a->kind == IN_FUSED) {
            e->fargs[a->index] = base;
            continue;
        }
        oar_ktensor *kt = a->kind == IN_KIN ? &e->kin[a->index] : a->kind == IN_KOUT ? &e->kout[a->index]
                                                                                 : &e->copy_io[1];
        kt->data = base + a->byte_off;
        kt->buffer = base;
        kt->offset = a->byte_off / (int64_t)oar_dtype_size((oar_dtype)kt->dtype);
    }
}

/* Devices: the compiled kernels for dev (after oar_executor_compile): the
 * graph's grouping rendered as OpenCL C (CUDA C on a cuda device,
 * oari_renderer_for) and built through the device's
 * build_program, once per executor and device. NULL: run unfused (not
 * compiled, the device runs no generated code, or the build failed: said
 * once, the device's message, e.g. the build log, left in oar_last_error()). */
static oari_fusion *device_fusion(oar_executor *ex, oar_device *dev) {
    if (!ex->compile_wanted || ex->dev_failed == dev || !dev->iface->build_program) return NULL;
    if (ex->dev_fusion && ex->dev_fusion->device == dev) return ex->dev_fusion;
    for (int i = 0; ex->dev_fusion && i < N_CACHED_PLANS; i++) /* plans that borrow the kernels replaced */
        if (ex->cache[i].fusion == ex->dev_fusion) drop_plan(ex->g, &ex->cache[i]);
    oari_fusion_free(ex->dev_fusion);
    ex->dev_fusion = NULL;
    oari_fusion *f = NULL;
    int st = oari_fuse_graph(ex->g, oari_renderer_for(dev), &f);
    const char *dbg = getenv("OAR_DEBUG");
    if (!st && dbg && atoi(dbg) >= 1 && f->n_kernels)
        fprintf(stderr, "oar: compiled kernels for %s (%d)\n%s", dev->name, f->n_kernels, oari_sbuf_str(&f->source));
    if (!st) st = oari_fusion_build_on(f, dev);
    if (st) {
        oari_fusion_free(f);
        ex->dev_failed = dev;
        oari_log(OAR_LOG_WARN, dev->name, "the graph's compiled kernels failed to build; it runs unfused "
                 "(oar_last_error() has the reason)");
        return NULL;
    }
    return ex->dev_fusion = f;
}

/* Devices: constant v's copy on dev, its storage whole, so that its view
 * (shape, strides, offset) is the same as on the CPU. Copied once per
 * executor and device, shared by its plans (a new input shape uploads no
 * weights again). A new reference; NULL with an error. */
static oar_tensor *const_on(oar_executor *ex, int v, oar_device *dev) {
    if (ex->dev_const_on != dev) {
        drop_dev_consts(ex);
        if (!(ex->dev_const = oari_calloc((size_t)ex->g->n_values, sizeof *ex->dev_const))) return NULL;
        ex->n_dev_const = ex->g->n_values;
        ex->dev_const_on = dev;
    }
    if (ex->dev_const[v]) return oar_tensor_retain(ex->dev_const[v]);
    oar_tensor *c = ex->g->values[v].constant;
    int64_t nbytes = (int64_t)c->storage->nbytes;
    oar_tensor *bytes = oari_tensor_empty(dev, OAR_U8, 1, &nbytes);
    if (!bytes) return NULL;
    oar_tensor *t = oari_tensor_make(bytes->storage, c->dtype, c->ndim, c->shape, c->strides, c->offset);
    oar_tensor_release(bytes);
    if (t && oari_device_from_host(dev, t->storage->data, 0, c->storage->data, c->storage->nbytes)) {
        oar_tensor_release(t);
        return NULL;
    }
    return t ? oar_tensor_retain(ex->dev_const[v] = t) : NULL;
}

static int plan_inputs(oar_executor *ex, oar_tensor *const *inputs) {
    const oar_graph *g = ex->g;
    drop_plan(g, &ex->p);
    int st = bind_inputs(ex, inputs);
    if (st) return st;
    oar_device *dev = ex->p.dev;
    const bool on_dev = dev != oari_device_cpu(); /* devices: see run_on_device */
    ex->p.fusion = on_dev ? device_fusion(ex, dev) : ex->fusion;
    int nv = g->n_values, nn = g->n_nodes;
    oar_tensor **sym = oari_calloc((size_t)(nv ? nv : 1), sizeof *sym);
    int *root = oari_malloc((size_t)(nv ? nv : 1) * sizeof *root);
    int *bufof = oari_malloc((size_t)(nv ? nv : 1) * sizeof *bufof);
    int *share = oari_malloc((size_t)(nv ? nv : 1) * sizeof *share); /* whose buffer v uses */
    int cap_bufs = nv + 1;
    for (int i = 0; i < nn; i++) cap_bufs += g->nodes[i].n_in + g->nodes[i].n_out;
    oari_membuf *bufs = oari_calloc((size_t)cap_bufs, sizeof *bufs);
    bool *emul = oari_calloc((size_t)(nn ? nn : 1), sizeof *emul);
    int *tmp_first = oari_calloc((size_t)(nn ? nn : 1), sizeof *tmp_first);
    oar_dtype *kdt = oari_malloc((size_t)(nn ? nn : 1) * sizeof *kdt);
    ex->p.vt = oari_calloc((size_t)(nv ? nv : 1), sizeof *ex->p.vt);
    ex->p.en = oari_calloc((size_t)(nn ? nn : 1), sizeof *ex->p.en);
    if (!sym || !root || !bufof || !share || !bufs || !emul || !tmp_first || !kdt || !ex->p.vt || !ex->p.en) {
        st = oari_fail_status();
        goto done;
    }
    for (int v = 0; v < nv; v++) {
        root[v] = -1;
        bufof[v] = -1;
    }
    /* 1. shapes: every shape rule again, on symbolic tensors */
    for (int i = 0; i < g->n_inputs && !st; i++) {
        int v = g->inputs[i];
        root[v] = v;
        if (!(sym[v] = oari_tensor_make(NULL, inputs[i]->dtype, inputs[i]->ndim, inputs[i]->shape, NULL, 0)))
            st = oari_fail_status();
    }
    for (int v = 0; v < nv && !st; v++)
        if (g->values[v].kind == OARI_V_CONST) sym[v] = oar_tensor_retain(g->values[v].constant);
    /* guards: oar_graph_verify refuses these graphs, but one may reach here
     * unverified (an input value missing from the inputs, a constant
     * without its tensor, a node reading a value not made before it) */
    for (int v = 0; v < nv && !st; v++)
        if (g->values[v].kind != OARI_V_NODE && !sym[v])
            st = oari_error(OAR_ERR_INVALID, "executor: value %d is an input the graph does not list or a constant "
                            "without a tensor (malformed graph; oar_graph_verify says more)", v);
    for (int i = 0; i < nn && !st; i++) {
        const oari_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_in && !st; k++)
            if ((n->in[k] >= 0 && !sym[n->in[k]]) || (k == 0 && n->in[k] < 0 && !oari_is_ctrl(n->op)))
                st = oari_error(OAR_ERR_INVALID, "executor: node %d input %d (%%%d) is not defined before it "
                                "(malformed graph)", i, k, n->in[k]);
        if (st) break;
        if (oari_is_ctrl(n->op)) { /* control flow: outputs as recorded (exec_control.c) */
            st = oari_exec_control_shapes(g, n, ex->sym_vals, sym);
            for (int j = 0; j < n->n_out; j++) root[n->out[j]] = n->out[j];
            kdt[i] = OAR_F32;
            continue;
        }
        const oari_op_def *def = oari_op_defs[n->op];
        exec_node *e = &ex->p.en[i];
        e->attrs = n->attrs;
        for (int k = 0; k < n->attrs.ni; k++)
            if (n->isym[k] >= 0) e->attrs.i[k] = ex->sym_vals[n->isym[k]] * n->imul[k];
        oar_tensor *in[OARI_MAX_IN];
        for (int k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? sym[n->in[k]] : NULL;
        oari_infer c;
        memset(&c, 0, sizeof c);
        c.op = def->name;
        c.n_in = n->n_in;
        c.in = in;
        c.attrs = &e->attrs;
        for (int k = 0; k < n->n_in; k++) c.in_dtype[k] = in[k] ? in[k]->dtype : OAR_F32;
        c.kernel_dtype = in[0]->dtype;
        if ((st = def->infer(&c))) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            st = oari_error(st, "executor: node %d (%s): %s", i, def->name, msg);
            break;
        }
        for (int k = 0; k < n->n_in && !st; k++)
            if (in[k] && c.in_dtype[k] != in[k]->dtype)
                st = oari_error(OAR_ERR_INVALID, "executor: node %d (%s) input %d needs a cast the "
                                "graph lacks", i, def->name, k);
        kdt[i] = c.kernel_dtype;
        emul[i] = !(def->flags & OARI_F_VIEW) &&
                  oari_plan_route(dev, n->op, c.kernel_dtype, n->n_in, in, &e->attrs) == OARI_ROUTE_VIA_F32;
        for (int j = 0; j < n->n_out && !st; j++) {
            int v = n->out[j];
            if (def->flags & OARI_F_VIEW) {
                sym[v] = def->view(in[0], &e->attrs);
                root[v] = root[n->in[0]];
            } else {
                sym[v] = oari_tensor_make(NULL, c.out[j].dtype, c.out[j].ndim, c.out[j].shape, NULL, 0);
                root[v] = v;
            }
            if (!sym[v]) st = oari_fail_status();
        }
    }
    if (st) goto done;
    /* donated outputs: where they are made */
    if (!(ex->p.out_mode = oari_calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *ex->p.out_mode))) {
        st = oari_fail_status();
        goto done;
    }
    for (int i = 0; i < g->n_inputs; i++) ex->p.in_place[i] = !on_dev && input_in_place(ex, root, emul, i);
    if (ex->p.fusion && !on_dev) { /* compiled kernels may be deferred (donation_in_place) */
        if (!(ex->p.run_at = oari_malloc((size_t)nn * sizeof *ex->p.run_at))) {
            st = oari_fail_status();
            goto done;
        }
        for (int i = 0; i < nn; i++) ex->p.run_at[i] = i;
    }
    /* (oar_executor_donate checked that the two agree in dtype and shape,
     * dynamic dims included, so they do in every plan) */
    for (int j = 0; j < g->n_outputs; j++) {
        int i = ex->donor[j];
        if (i < 0) continue;
        ex->p.out_mode[j] = donation_in_place(ex, root, emul, sym, j, i) ? OUT_DONATED : OUT_COPIED;
        ex->p.written[i] = ex->p.written[i] || ex->p.out_mode[j] == OUT_DONATED;
    }
    if (ex->p.run_at) { /* the deferred kernels' roots, in the order they run */
        int nd = 0;
        for (int i = 0; i < nn; i++) nd += ex->p.run_at[i] != i;
        if (nd && !(ex->p.deferred = oari_malloc((size_t)nd * sizeof *ex->p.deferred))) {
            st = oari_fail_status();
            goto done;
        }
        ex->p.n_deferred = nd;
        nd = 0;
        for (int at = 0; at <= nn; at++)
            for (int i = 0; i < nn; i++)
                if (ex->p.run_at[i] != i && ex->p.run_at[i] == at) ex->p.deferred[nd++] = i;
        if (!nd) {
            oari_free(ex->p.run_at, (size_t)nn * sizeof *ex->p.run_at);
            ex->p.run_at = NULL;
        }
    }
    /* 2. buffers by liveness: one per root value, live from its producer to
     * the last node reading it or any view of it; wanted outputs live to
     * the end */
    int nb = 0;
    for (int v = 0; v < nv; v++) {
        if (root[v] != v || is_internal(ex, v)) continue;
        const oari_gvalue *gv = &g->values[v];
        bufof[v] = nb;
        bufs[nb].size = sym[v]->numel * (int64_t)oar_dtype_size(sym[v]->dtype);
        bufs[nb].first = gv->kind == OARI_V_INPUT ? -1 : gv->producer;
        bufs[nb].last = bufs[nb].first;
        nb++;
    }
    for (int i = 0; i < nn; i++) {
        const oari_gnode *n = &g->nodes[i];
        int at = reads_at(ex, i);
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0 && root[v] >= 0 && bufof[root[v]] >= 0 && bufs[bufof[root[v]]].last < at)
                bufs[bufof[root[v]]].last = at;
        }
    }
    for (int j = 0; j < g->n_outputs; j++) {
        int v = g->outputs[j];
        if (root[v] >= 0 && !ex->discard[j] && ex->p.out_mode[j] != OUT_DONATED) bufs[bufof[root[v]]].last = nn;
    }
    /* an elementwise op may write over an input of its shape and dtype whose
     * buffer dies at that op (x -> exp -> sin reuses one buffer) */
    int64_t unplanned = 0;
    for (int b = 0; b < nb; b++) unplanned += (bufs[b].size + 63) / 64 * 64;
    for (int v = 0; v < nv; v++) share[v] = v;
    for (int i = 0; i < nn; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (oari_is_ctrl(n->op)) continue;
        const oari_op_def *def = oari_op_defs[n->op];
        int out = n->out[0];
        /* a compiled kernel reads its inputs at other indices, unless flat
         * or but for some leaves (same_index) */
        int kern = kernel_of(ex, i);
        const oari_kernel *K = kern >= 0 ? &ex->p.fusion->kernels[kern] : NULL;
        if (K ? K->root != i || (!K->flat && !K->same_index)
              : (def->fusion != OARI_FUSE_ELEMWISE && def->fusion != OARI_FUSE_BROADCAST) ||
                    (def->flags & (OARI_F_INPLACE | OARI_F_VIEW)) || n->n_out != 1)
            continue;
        if (root[out] != out || made_in_input(ex, out)) continue;
        int n_read = K ? K->n_args - 1 : n->n_in;
        for (int k = 0; k < n_read; k++) {
            int v = K ? K->args[k + 1] : n->in[k];
            if (K && !kernel_reads_at_output(K, v)) continue;
            if (v < 0 || root[v] != v || g->values[v].kind != OARI_V_NODE || made_in_input(ex, v)) continue;
            /* a kernel's other leaves must not read the same buffer (a view of
             * it left to the executor is read at other indices) */
            bool other_reader = false;
            for (int a = 1; K && a < K->n_args && !other_reader; a++) {
                int r = root[K->args[a]];
                other_reader = K->args[a] != v && r >= 0 && share[r] == share[v];
            }
            if (other_reader) continue;
            oari_membuf *b = &bufs[bufof[share[v]]];
            if (b->last != i || sym[v]->dtype != sym[out]->dtype || sym[v]->ndim != sym[out]->ndim ||
                memcmp(sym[v]->shape, sym[out]->shape, (size_t)sym[v]->ndim * sizeof(int64_t)))
                continue;
            /* another input may read the same buffer (x * x): same index, still fine */
            oari_membuf *o = &bufs[bufof[out]];
            if (o->last > b->last) b->last = o->last;
            o->size = 0;
            o->last = o->first;
            share[out] = share[v];
            break;
        }
    }
    /* f32 temporaries of ops run in f32 for lack of a half kernel, live at that op */
    for (int i = 0; i < nn; i++) {
        if (!emul[i] || kernel_of(ex, i) >= 0) continue;
        const oari_gnode *n = &g->nodes[i];
        tmp_first[i] = nb;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0 || !oari_is_half(sym[v]->dtype)) continue;
            bufs[nb] = (oari_membuf){.size = sym[v]->numel * 4, .first = i, .last = i};
            unplanned += (bufs[nb].size + 63) / 64 * 64;
            nb++;
        }
    }
    /* inputs read in place, and outputs made in them, need no slot */
    for (int i = 0; i < g->n_inputs; i++)
        if (ex->p.in_place[i]) bufs[bufof[g->inputs[i]]].size = 0;
    for (int j = 0; j < g->n_outputs; j++)
        if (ex->p.out_mode[j] == OUT_DONATED) bufs[bufof[g->outputs[j]]].size = 0;
    int64_t peak = oari_memplan(bufs, nb, NULL);
    ex->p.unplanned_bytes = unplanned;
    if (peak < 0) {
        st = oari_fail_status();
        goto done;
    }
    ex->p.planned_bytes = peak;
    int64_t asize = peak > 0 ? peak : 64;
    if (!(ex->p.arena = oari_tensor_empty(dev, OAR_U8, 1, &asize))) {
        st = oari_fail_status();
        goto done;
    }
    /* 3. real tensors in the arena; views of them; constants */
    for (int v = 0; v < nv && !st; v++) {
        if (g->values[v].kind == OARI_V_CONST)
            ex->p.vt[v] = on_dev ? const_on(ex, v, dev) : oar_tensor_retain(g->values[v].constant);
        else if (root[v] == v && !is_internal(ex, v))
            ex->p.vt[v] = oari_tensor_make(ex->p.arena->storage, sym[v]->dtype, sym[v]->ndim, sym[v]->shape,
                                           NULL, bufs[bufof[share[v]]].offset / (int64_t)oar_dtype_size(sym[v]->dtype));
        else continue;
        if (!ex->p.vt[v]) st = oari_fail_status();
    }
    oar_device *cpu = oari_device_cpu();
    for (int i = 0; i < nn && !st; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (oari_is_ctrl(n->op)) continue; /* runs through oari_exec_control */
        const oari_op_def *def = oari_op_defs[n->op];
        exec_node *e = &ex->p.en[i];
        if (kernel_of(ex, i) >= 0) {
            if (is_kernel_root(ex, i) && (st = setup_fused(ex, i, sym))) break;
            continue;
        }
        if (def->flags & OARI_F_VIEW) {
            if (!(ex->p.vt[n->out[0]] = def->view(ex->p.vt[n->in[0]], &e->attrs))) st = oari_fail_status();
            continue;
        }
        if (!(e->kin = oari_calloc((size_t)(n->n_in ? n->n_in : 1), sizeof *e->kin))) {
            st = oari_fail_status();
            break;
        }
        oar_tensor *tv[OARI_MAX_IN + OARI_MAX_OUT]; /* what the kernel reads and writes */
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            tv[k] = v >= 0 ? ex->p.vt[v] : NULL;
        }
        oar_tensor *out0 = tv[n->n_in];
        if (def->flags & OARI_F_INPLACE) tv[0] = out0; /* the op updates a copy of in[0] (below) */
        bool empty = !(def->flags & OARI_F_INPLACE);
        for (int j = 0; j < n->n_out; j++) empty = empty && tv[n->n_in + j]->numel == 0;
        if ((def->flags & OARI_F_INPLACE) && !on_dev) { /* on a device: run_on_device copies */
            oar_tensor *src = ex->p.vt[n->in[0]];
            if (!(e->copy_k = oari_kernel_lookup(cpu, OARI_OP_copy, out0->dtype))) {
                st = oari_error(OAR_ERR_UNSUPPORTED, "executor: no copy kernel for %s",
                                oar_dtype_name(out0->dtype));
                break;
            }
            oari_ktensor(out0, &e->copy_io[0]);
            oari_ktensor(src, &e->copy_io[1]);
            e->copy_call = (oar_kernel_call){.op = "copy", .n_in = 2, .n_out = 1, .in = e->copy_io,
                                             .out = e->copy_io};
        }
        if (empty) continue;
        /* the kernel call as dispatch would plan it; f32 temporaries in the arena */
        arena_temps temps = {.arena = ex->p.arena, .bufs = bufs + tmp_first[i]};
        if ((st = oari_plan_make(&e->plan, n->op, dev, kdt[i], n->n_in, tv, &e->attrs, n->n_out, tv + n->n_in,
                                 e->kin, e->kout, arena_temp, &temps))) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            st = oari_error(st, "executor: node %d (%s): %s", i, def->name, msg);
            break;
        }
        e->runs = true;
        if (def->flags & OARI_F_RANDOM) e->rand_stride = out0->numel;
    }
    if (!st) st = record_input_readers(ex, root);
    if (!st) {
        for (int i = 0; i < g->n_inputs; i++) {
            ex->p.ndims[i] = inputs[i]->ndim;
            memcpy(ex->p.shapes[i], inputs[i]->shape, (size_t)inputs[i]->ndim * sizeof(int64_t));
        }
        memcpy(ex->p.sym_vals, ex->sym_vals, sizeof ex->sym_vals);
        ex->p.planned = true;
        ex->n_plans++;
    }
done:
    if (sym)
        for (int v = 0; v < nv; v++) oar_tensor_release(sym[v]);
    oari_free(sym, (size_t)(nv ? nv : 1) * sizeof *sym);
    oari_free(root, (size_t)(nv ? nv : 1) * sizeof *root);
    oari_free(bufof, (size_t)(nv ? nv : 1) * sizeof *bufof);
    oari_free(share, (size_t)(nv ? nv : 1) * sizeof *share);
    oari_free(bufs, (size_t)cap_bufs * sizeof *bufs);
    oari_free(kdt, (size_t)(nn ? nn : 1) * sizeof *kdt);
    oari_free(emul, (size_t)(nn ? nn : 1) * sizeof *emul);
    oari_free(tmp_first, (size_t)(nn ? nn : 1) * sizeof *tmp_first);
    if (st) drop_plan(g, &ex->p);
    return st;
}

static bool same_shapes(const oar_graph *g, const plan *p, oar_tensor *const *inputs) {
    if (!p->planned) return false;
    if (g->n_inputs && inputs[0] && inputs[0]->storage && inputs[0]->storage->device != p->dev) return false;
    for (int i = 0; i < g->n_inputs; i++) {
        const oar_tensor *t = inputs[i];
        if (!t || t->ndim != p->ndims[i] || memcmp(t->shape, p->shapes[i], (size_t)t->ndim * sizeof(int64_t)))
            return false;
        if (t->dtype != g->values[g->inputs[i]].dtype) return false;
    }
    return true;
}

/* Makes the plan for these input shapes current: a cached one, or a new
 * one (the current plan is cached, evicting the least recently used). */
static int select_plan(oar_executor *ex, oar_tensor *const *inputs) {
    const oar_graph *g = ex->g;
    if (same_shapes(g, &ex->p, inputs)) return 0;
    int lru = 0;
    for (int i = 0; i < N_CACHED_PLANS; i++) {
        if (same_shapes(g, &ex->cache[i], inputs)) {
            plan t = ex->p;
            ex->p = ex->cache[i];
            ex->cache[i] = t;
            return 0;
        }
        if (ex->cache[i].used < ex->cache[lru].used) lru = i;
    }
    if (ex->p.planned) {
        drop_plan(g, &ex->cache[lru]);
        ex->cache[lru] = ex->p;
        memset(&ex->p, 0, sizeof ex->p);
    }
    return plan_inputs(ex, inputs);
}

int oari_exec_copy(oar_tensor *dst, oar_tensor *src) {
    if (dst == src || !dst->numel) return 0;
    oar_device *cpu = oari_device_cpu(); /* devices: dispatch's copy below */
    if (dst->storage->device == cpu && src->storage->device == cpu && oar_tensor_is_contiguous(dst) &&
        oar_tensor_is_contiguous(src)) {
        memcpy(oar_tensor_data(dst), oar_tensor_data(src), (size_t)dst->numel * oar_dtype_size(dst->dtype));
        return 0;
    }
    oar_tensor *pair[2] = {dst, src}, *r = NULL;
    oar_no_grad_push(); /* dst may be a parameter that requires grad */
    int st = oari_dispatch(OARI_OP_copy, 2, pair, NULL, &r);
    oar_no_grad_pop();
    oar_tensor_release(r);
    return st;
}

/* Control node i on its planned values. */
static int run_control(oar_executor *ex, int i) {
    const oari_gnode *n = &ex->g->nodes[i];
    if (!ex->ctrl && !(ex->ctrl = oari_calloc((size_t)ex->g->n_nodes, sizeof *ex->ctrl))) return oari_fail_status();
    oar_tensor *in[OARI_MAX_IN], *out[OARI_GMAX_OUT];
    for (int k = 0; k < n->n_in; k++) in[k] = ex->p.vt[n->in[k]];
    for (int j = 0; j < n->n_out; j++) out[j] = ex->p.vt[n->out[j]];
    return oari_exec_control(&ex->ctrl[i], n, i, in, out);
}

/* ---- devices other than the CPU --------------------------------------------------
 * The arena and the constants live on the plan's device and each node runs
 * the device's kernel, or (no kernel for its op and dtype, or the device's
 * supports_op says no: dispatch's rule) runs on the CPU with copies through
 * oari_device_run_on_cpu, which warns once per op. Inputs are copied into
 * their slots (none read in place) and donated outputs copied back. A loop
 * of its own, so the CPU loop above does no per-node device work. */

/* Outputs donated to an input but made elsewhere are copied into it; the
 * caller's outputs[] are set. */
static int finish_outputs(oar_executor *ex, oar_tensor *const *inputs, oar_tensor **outputs) {
    const oar_graph *g = ex->g;
    int st;
    for (int j = 0; j < g->n_outputs; j++)
        if (ex->p.out_mode[j] == OUT_COPIED && (st = oari_exec_copy(inputs[ex->donor[j]], ex->p.vt[g->outputs[j]])))
            return st;
    for (int j = 0; j < g->n_outputs; j++)
        outputs[j] = ex->discard[j] ? NULL : ex->donor[j] >= 0 ? inputs[ex->donor[j]] : ex->p.vt[g->outputs[j]];
    return 0;
}

static int run_on_device(oar_executor *ex, oar_tensor *const *inputs, oar_tensor **outputs) {
    const oar_graph *g = ex->g;
    oar_device *dev = ex->p.dev;
    int st = 0;
    for (int i = 0; i < g->n_inputs; i++)
        if ((st = oari_exec_copy(ex->p.vt[g->inputs[i]], inputs[i]))) return st;
    if (OARI_PROF_ENABLED()) pthread_once(&fused_names_once, make_fused_names);
    for (int i = 0; i < g->n_nodes && !st; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (oari_is_ctrl(n->op)) { /* control flow: exec_control.c */
            st = run_control(ex, i);
            continue;
        }
        exec_node *e = &ex->p.en[i];
        if (e->dev_fn) { /* a compiled kernel */
            int64_t prof_t0 = OARI_PROF_BEGIN();
            if ((st = dev->iface->launch(dev->ctx, dev->index, e->dev_fn, e->n_fargs, e->fargs, e->n_fscal, e->fscal,
                                         e->global)))
                return oari_error(st, "executor: compiled kernel at node %d on %s: %s", i, dev->name, oar_last_error());
            OARI_PROF_END(OAR_PROFILER_OP, fused_names[n->op], prof_t0, 1, &ex->p.vt[n->out[0]]);
            continue;
        }
        if (!e->runs) continue; /* a view, an empty output, a kernel member */
        const oari_op_def *def = oari_op_defs[n->op];
        int64_t prof_t0 = OARI_PROF_BEGIN();
        oar_tensor **out = &ex->p.vt[n->out[0]];
        /* an in-place op updates its output, a copy of in[0] (planned so) */
        if ((def->flags & OARI_F_INPLACE) && (st = oari_exec_copy(out[0], ex->p.vt[n->in[0]]))) break;
        if (e->rand_stride) e->attrs.i[1] = n->attrs.i[1] + (int64_t)(ex->runs - 1) * e->rand_stride;
        st = oari_plan_run(&e->plan);
        if (st) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            return oari_error(st, "executor: node %d (%s) on %s: %s", i, def->name, dev->name, msg);
        }
        OARI_PROF_END(OAR_PROFILER_OP, def->name, prof_t0, 1, out);
    }
    return st ? st : finish_outputs(ex, inputs, outputs);
}

int oar_executor_run(oar_executor *ex, oar_tensor *const *inputs, oar_tensor **outputs) {
    if (!ex || (!inputs && ex->g->n_inputs) || !outputs)
        return oari_error(OAR_ERR_INVALID, "executor_run: executor, inputs or outputs is NULL");
    const oar_graph *g = ex->g;
    int st = 0;
    if ((st = select_plan(ex, inputs))) return st;
    ex->p.used = ++ex->runs;
    if (ex->p.dev != oari_device_cpu()) return run_on_device(ex, inputs, outputs);
    bool via_fallback[64] = {0};
    for (int i = 0; i < g->n_inputs; i++) {
        oar_tensor *slot = ex->p.vt[g->inputs[i]], *t = inputs[i];
        if (!t->storage || t->storage->device != oari_device_cpu())
            return oari_error(OAR_ERR_INVALID, "executor: input %d is on %s; the plan is for the CPU", i,
                              t->storage ? t->storage->device->name : "no device");
        if (ex->p.in_place[i]) {
            /* read in place; a strided input, or one living in this plan's
             * arena (an output of the last run fed back: this run overwrites
             * it), goes through a copy made once per plan (the slot is empty);
             * so does an input written in place that shares its storage with
             * another input (which must still read the old values) */
            oar_tensor *src = t;
            bool written = ex->p.written[i], shared = false;
            for (int q = 0; q < g->n_inputs && written; q++)
                shared = shared || (q != i && inputs[q]->storage == t->storage);
            if (!oar_tensor_is_contiguous(t) || t->storage == ex->p.arena->storage || shared) {
                if (!ex->p.fallback[i] &&
                    !(ex->p.fallback[i] = oari_tensor_empty(oari_device_cpu(), t->dtype, t->ndim, t->shape)))
                    return oari_fail_status();
                if ((st = oari_exec_copy(ex->p.fallback[i], t))) return st;
                src = ex->p.fallback[i];
                via_fallback[i] = written;
            }
            point_input_readers(ex, i, oar_tensor_data(src));
            continue;
        }
        if ((st = oari_exec_copy(slot, t))) return st;
    }
    void *ctx = oari_device_cpu()->ctx;
    if (OARI_PROF_ENABLED()) pthread_once(&fused_names_once, make_fused_names);
    int next_deferred = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        while (next_deferred < ex->p.n_deferred && ex->p.run_at[ex->p.deferred[next_deferred]] <= i)
            run_fused(ex, ex->p.deferred[next_deferred++]);
        int after = next_kernel(ex, i, next_deferred);
        if (after >= 0) prefetch_small_args(ex, after);
        if (oari_is_ctrl(g->nodes[i].op)) { /* control flow: exec_control.c */
            if ((st = run_control(ex, i))) return st;
            continue;
        }
        exec_node *e = &ex->p.en[i];
        if (e->fused) {
            if (!ex->p.run_at || ex->p.run_at[i] == i) run_fused(ex, i); /* else: runs later */
            continue;
        }
        int64_t prof_t0 = e->runs ? OARI_PROF_BEGIN() : 0; /* profiler: a span per kernel */
        int64_t node_t0 = ex->node_ns ? oari_prof_now() : 0;
        oar_tensor **prof_out = &ex->p.vt[g->nodes[i].out[0]];
        if (e->copy_k && (st = e->copy_k(ctx, &e->copy_call))) return st;
        /* random ops draw fresh values each run: the trace's offset, advanced */
        if (e->rand_stride) e->attrs.i[1] = g->nodes[i].attrs.i[1] + (int64_t)(ex->runs - 1) * e->rand_stride;
        if (e->runs && (st = oari_plan_run(&e->plan))) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            return oari_error(st, "executor: node %d (%s): %s", i, oari_op_name(g->nodes[i].op), msg);
        }
        OARI_PROF_END(OAR_PROFILER_OP, oari_op_name(g->nodes[i].op), prof_t0, 1, prof_out);
        if (node_t0) ex->node_ns[i] += (double)(oari_prof_now() - node_t0);
    }
    while (next_deferred < ex->p.n_deferred) run_fused(ex, ex->p.deferred[next_deferred++]);
    /* donated outputs land in their inputs */
    for (int i = 0; i < g->n_inputs; i++)
        if (via_fallback[i] && (st = oari_exec_copy(inputs[i], ex->p.fallback[i]))) return st;
    return finish_outputs(ex, inputs, outputs);
}

/* ---- compiled kernels (src/compiler/) ------------------------------------------- */

static void drop_all_plans(oar_executor *ex) {
    drop_plan(ex->g, &ex->p);
    for (int i = 0; i < N_CACHED_PLANS; i++) drop_plan(ex->g, &ex->cache[i]);
}

int oar_executor_compile(oar_executor *ex) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_compile: executor is NULL");
    if (!ex->compile_wanted) { /* devices: plans made from now on compile for their device */
        ex->compile_wanted = true;
        drop_all_plans(ex);
    }
    if (ex->fusion) return 0;
    oari_fusion *f = NULL;
    int st = oari_fuse_graph(ex->g, &oari_render_c, &f);
    if (st) return st;
    const char *dbg = getenv("OAR_DEBUG");
    if (dbg && atoi(dbg) >= 1 && f->n_kernels)
        fprintf(stderr, "oar: compiled kernels (%d)\n%s", f->n_kernels, oari_sbuf_str(&f->source));
    if (f->n_kernels && (st = oari_fusion_build(f))) {
        oari_fusion_free(f);
        if (st == OAR_ERR_UNSUPPORTED) { /* no C compiler: the graph runs unfused (said once by the JIT) */
            oar_clear_error();
            return 0;
        }
        return st;
    }
    drop_all_plans(ex);
    ex->fusion = f;
    return 0;
}

oari_fusion *oari_executor_fusion(const oar_executor *ex) { return ex ? ex->fusion : NULL; }

void oari_executor_time_nodes(oar_executor *ex, double *ns) {
    if (ex) ex->node_ns = ns;
}

int oari_executor_use_fusion(oar_executor *ex, oari_fusion *f) {
    if (!ex || !f || f->n_nodes != ex->g->n_nodes)
        return oari_error(OAR_ERR_INVALID, "executor: kernels compiled for another graph");
    drop_all_plans(ex);
    oari_fusion_free(ex->fusion);
    ex->fusion = oari_fusion_retain(f);
    return 0;
}

int oar_executor_num_kernels(const oar_executor *ex) {
    if (!ex) return oari_error(OAR_ERR_INVALID, "executor_num_kernels: executor is NULL");
    oari_fusion *f = ex->p.planned && ex->p.dev != oari_device_cpu() ? ex->p.fusion : ex->fusion; /* devices */
    if (f) return f->n_launches;
    int n = 0;
    for (int i = 0; i < ex->g->n_nodes; i++) n += !(oari_gnode_def(&ex->g->nodes[i])->flags & OARI_F_VIEW);
    return n;
}

bool oar_executor_is_compiled(const oar_executor *ex) {
    return ex ? (ex->fusion && ex->fusion->n_kernels) : (oari_null_arg(__func__, "executor"), false);
}

const char *oar_executor_kernel_source(const oar_executor *ex) {
    if (!ex || !ex->fusion || !ex->fusion->n_kernels) return NULL;
    return oari_sbuf_str(&ex->fusion->source);
}

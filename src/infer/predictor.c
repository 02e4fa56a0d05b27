/* The predictor: a loaded, optimised graph shared by clones, and a pool of
 * idle executors so that concurrent runs each get their own arena. */
#include "../graph/ir.h"
#include "../exec/exec.h"

#include <oar/infer.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

typedef struct model {
    int refcount; /* atomic */
    oar_graph *g;
    oari_fusion *fusion; /* compiled kernels every executor runs; NULL: unfused */
} model;

/* A new executor of m's graph, with m's compiled kernels. */
static oar_executor *new_executor(model *m) {
    oar_executor *ex = oar_executor_new(m->g);
    if (ex && m->fusion && oari_executor_use_fusion(ex, m->fusion)) {
        oar_executor_free(ex);
        return NULL;
    }
    return ex;
}

struct oar_predictor {
    model *m;
    int num_threads;
    pthread_mutex_t lock;          /* guards idle[] */
    oar_executor **idle;
    int n_idle, cap_idle;
    pthread_mutex_t borrowed_lock; /* serialises run_borrowed */
    oar_executor *borrowed;
};

static oar_predictor *wrap(model *m, int num_threads) {
    oar_predictor *p = oari_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->m = m;
    p->num_threads = num_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->borrowed_lock, NULL);
    __atomic_add_fetch(&m->refcount, 1, __ATOMIC_ACQ_REL);
    return p;
}

/* After a pass that made r changes (< 0: failed), the graph on stderr
 * when asked; returns r. */
static int after_pass(const oar_graph *g, const char *name, int r, bool print) {
    if (r >= 0 && print) {
        fprintf(stderr, "-- after %s (%d changes)\n", name, r);
        oar_graph_print(g, stderr);
    }
    return r;
}

/* Runs the comma-separated passes of `list` in order. */
static int run_pass_list(oar_graph *g, const char *list, bool print) {
    char name[64];
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof name)
            return oari_error(OAR_ERR_INVALID, "predictor: bad pass list \"%s\"", list);
        memcpy(name, p, n);
        name[n] = 0;
        int r = after_pass(g, name, oar_graph_run_pass(g, name), print);
        if (r < 0) return r;
        p += n + (p[n] == ',');
    }
    return oar_graph_verify(g);
}

/* The predictor's own passes, under its thread count: quantized linear
 * layers into qlinear nodes, then prepack_conv, which packs each weight in
 * the layout oneDNN picks for the threads its kernel will run on (16
 * threads asked for other blocks than 2) and for cfg->batch, then pools
 * without their unused indices. */
static int run_own_passes(oar_graph *g, const oar_predictor_config *cfg) {
    int saved = omp_get_max_threads();
    if (cfg->num_threads > 0) omp_set_num_threads(cfg->num_threads);
    int st = run_pass_list(g, "fuse_qlinear", cfg->print_passes);
    int r = st ? st
               : after_pass(g, "prepack_conv", oari_pass_prepack_conv_at(g, cfg->batch > 0 ? cfg->batch : 1),
                            cfg->print_passes);
    st = r < 0 ? r : run_pass_list(g, "pool_values", cfg->print_passes);
    if (cfg->num_threads > 0) omp_set_num_threads(saved);
    return st;
}

static oar_predictor *from_owned_graph(oar_graph *g, const oar_predictor_config *cfg) {
    if (!g) return NULL;
    if (cfg->passes && run_pass_list(g, cfg->passes, cfg->print_passes)) {
        oar_graph_free(g);
        return NULL;
    }
    if (!cfg->passes && cfg->optimize && oar_graph_optimize(g, OAR_PASSES_INFERENCE, cfg->print_passes ? OAR_PASS_PRINT : 0)) {
        oar_graph_free(g);
        return NULL;
    }
    /* quantized linear layers into qlinear nodes: the predictor's alone, as
     * no exporter maps qlinear (docs/quantization.md); convs on packed
     * weights; pools without their unused indices (no gradient here) */
    if (!cfg->passes && cfg->optimize && run_own_passes(g, cfg)) {
        oar_graph_free(g);
        return NULL;
    }
    model *m = oari_calloc(1, sizeof *m);
    if (!m) {
        oar_graph_free(g);
        return NULL;
    }
    m->g = g;
    if (!cfg->no_compile) { /* compile once; every executor shares the kernels */
        oar_executor *ex = oar_executor_new(g);
        int st = ex ? oar_executor_compile(ex) : oari_fail_status();
        if (st == OAR_ERR_IO) { /* an unwritable kernel cache: serve unfused rather than not at all */
            oari_log(OAR_LOG_WARN, "predictor", "%s; the model runs unfused", oar_last_error());
            oar_clear_error();
        } else if (st) {
            oar_executor_free(ex);
            oar_graph_free(g);
            oari_free(m, sizeof *m);
            return NULL;
        }
        m->fusion = oari_fusion_retain(oari_executor_fusion(ex));
        oar_executor_free(ex);
    }
    oar_predictor *p = wrap(m, cfg->num_threads);
    if (!p) {
        oari_fusion_free(m->fusion);
        oar_graph_free(g);
        oari_free(m, sizeof *m);
    }
    return p;
}

oar_predictor *oar_predictor_create(const oar_predictor_config *cfg) {
    if (!cfg || !cfg->model_dir)
        return oari_error(OAR_ERR_INVALID, "predictor_create: config or model_dir is NULL"), NULL;
    if (cfg->num_threads < 0)
        return oari_error(OAR_ERR_INVALID, "predictor_create: num_threads %d < 0", cfg->num_threads), NULL;
    if (cfg->batch < 0)
        return oari_error(OAR_ERR_INVALID, "predictor_create: batch %lld < 0", (long long)cfg->batch), NULL;
    return from_owned_graph(oar_graph_load(cfg->model_dir), cfg);
}

oar_predictor *oar_predictor_from_graph(const oar_graph *g, const oar_predictor_config *cfg) {
    static const oar_predictor_config none;
    if (!g) return oari_error(OAR_ERR_INVALID, "predictor_from_graph: graph is NULL"), NULL;
    if (!cfg) cfg = &none;
    if (cfg->num_threads < 0)
        return oari_error(OAR_ERR_INVALID, "predictor_from_graph: num_threads %d < 0", cfg->num_threads), NULL;
    if (cfg->batch < 0)
        return oari_error(OAR_ERR_INVALID, "predictor_from_graph: batch %lld < 0", (long long)cfg->batch), NULL;
    return from_owned_graph(oar_graph_clone(g), cfg);
}

oar_predictor *oar_predictor_clone(oar_predictor *p) {
    if (!p) return oari_error(OAR_ERR_INVALID, "predictor_clone: predictor is NULL"), NULL;
    return wrap(p->m, p->num_threads);
}

void oar_predictor_free(oar_predictor *p) {
    if (!p) return;
    for (int i = 0; i < p->n_idle; i++) oar_executor_free(p->idle[i]);
    oari_free(p->idle, (size_t)p->cap_idle * sizeof *p->idle);
    oar_executor_free(p->borrowed);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->borrowed_lock);
    if (__atomic_sub_fetch(&p->m->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        oari_fusion_free(p->m->fusion);
        oar_graph_free(p->m->g);
        oari_free(p->m, sizeof *p->m);
    }
    oari_free(p, sizeof *p);
}

const oar_graph *oar_predictor_graph(const oar_predictor *p) {
    return p ? p->m->g : (oari_null_arg(__func__, "predictor"), NULL);
}
bool oar_predictor_is_compiled(const oar_predictor *p) {
    return p ? (p->m->fusion && p->m->fusion->n_kernels) : (oari_null_arg(__func__, "predictor"), false);
}
int oar_predictor_num_inputs(const oar_predictor *p) {
    return p ? oar_graph_num_inputs(p->m->g) : (oari_null_arg(__func__, "predictor"), -1);
}
int oar_predictor_num_outputs(const oar_predictor *p) {
    return p ? oar_graph_num_outputs(p->m->g) : (oari_null_arg(__func__, "predictor"), -1);
}
const char *oar_predictor_input_name(const oar_predictor *p, int i) {
    return p ? oar_graph_input_name(p->m->g, i) : (oari_null_arg(__func__, "predictor"), NULL);
}
const char *oar_predictor_output_name(const oar_predictor *p, int i) {
    return p ? oar_graph_output_name(p->m->g, i) : (oari_null_arg(__func__, "predictor"), NULL);
}
int oar_predictor_input_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape) {
    return p ? oar_graph_input_shape(p->m->g, i, dtype, shape) : (oari_null_arg(__func__, "predictor"), -1);
}
int oar_predictor_output_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape) {
    return p ? oar_graph_output_shape(p->m->g, i, dtype, shape) : (oari_null_arg(__func__, "predictor"), -1);
}

int oar_predictor_input_index(const oar_predictor *p, const char *name) {
    for (int i = 0; p && name && i < oar_predictor_num_inputs(p); i++)
        if (!strcmp(oar_predictor_input_name(p, i), name)) return i;
    return -1;
}
int oar_predictor_output_index(const oar_predictor *p, const char *name) {
    for (int i = 0; p && name && i < oar_predictor_num_outputs(p); i++)
        if (!strcmp(oar_predictor_output_name(p, i), name)) return i;
    return -1;
}

/* Runs ex with p's thread setting for this thread. */
static int run_on(oar_predictor *p, oar_executor *ex, oar_tensor *const *inputs, oar_tensor **outs) {
    int saved = omp_get_max_threads();
    if (p->num_threads > 0) omp_set_num_threads(p->num_threads);
    int st = oar_executor_run(ex, inputs, outs);
    if (p->num_threads > 0) omp_set_num_threads(saved);
    return st;
}

static int give_out(const oar_graph *g, oar_tensor **outputs, oar_tensor *const *res) {
    for (int j = 0; j < g->n_outputs; j++) {
        oar_tensor *r = res[j], *dst = outputs[j];
        if (!dst) {
            oar_tensor *c = NULL;
            int st = oari_dispatch(OARI_OP_contiguous, 1, &r, NULL, &c);
            if (st) return st;
            outputs[j] = c;
            continue;
        }
        char s1[200], s2[200];
        if (dst->dtype != r->dtype || dst->ndim != r->ndim ||
            memcmp(dst->shape, r->shape, (size_t)r->ndim * sizeof *r->shape))
            return oari_error(OAR_ERR_INVALID, "predictor_run: output %d (%s) is %s %s but the buffer "
                              "given is %s %s; pass NULL to have it allocated", j, g->output_names[j],
                              oar_dtype_name(r->dtype), oari_shape_str(s1, r->ndim, r->shape),
                              oar_dtype_name(dst->dtype), oari_shape_str(s2, dst->ndim, dst->shape));
        oar_tensor *pair[2] = {dst, r}, *o = NULL;
        int st = oari_dispatch(OARI_OP_copy, 2, pair, NULL, &o);
        oar_tensor_release(o);
        if (st) return st;
    }
    return 0;
}

int oar_predictor_run(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs) {
    if (!p || !outputs) return oari_error(OAR_ERR_INVALID, "predictor_run: predictor or outputs is NULL");
    const oar_graph *g = p->m->g;
    pthread_mutex_lock(&p->lock);
    oar_executor *ex = p->n_idle ? p->idle[--p->n_idle] : NULL;
    pthread_mutex_unlock(&p->lock);
    if (!ex && !(ex = new_executor(p->m))) return oari_fail_status();
    oar_tensor *res[64];
    bool fresh[64] = {0};
    int no = g->n_outputs < 64 ? g->n_outputs : 64;
    for (int j = 0; j < no; j++) fresh[j] = outputs[j] == NULL;
    int st = g->n_outputs > 64 ? oari_error(OAR_ERR_INVALID, "predictor_run: more than 64 outputs")
                               : run_on(p, ex, inputs, res);
    if (!st) st = give_out(g, outputs, res);
    if (st)
        for (int j = 0; j < no; j++)
            if (fresh[j]) {
                oar_tensor_release(outputs[j]);
                outputs[j] = NULL;
            }
    pthread_mutex_lock(&p->lock);
    if (p->n_idle == p->cap_idle) {
        int nc = p->cap_idle ? p->cap_idle * 2 : 4;
        oar_executor **a = oari_realloc(p->idle, (size_t)p->cap_idle * sizeof *a, (size_t)nc * sizeof *a);
        if (a) {
            p->idle = a;
            p->cap_idle = nc;
        }
    }
    if (p->n_idle < p->cap_idle) p->idle[p->n_idle++] = ex;
    else oar_executor_free(ex);
    pthread_mutex_unlock(&p->lock);
    return st;
}

int oar_predictor_run_borrowed(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs) {
    if (!p || !outputs) return oari_error(OAR_ERR_INVALID, "predictor_run_borrowed: predictor or outputs is NULL");
    pthread_mutex_lock(&p->borrowed_lock);
    int st = 0;
    if (!p->borrowed && !(p->borrowed = new_executor(p->m))) st = oari_fail_status();
    if (!st) st = run_on(p, p->borrowed, inputs, outputs);
    pthread_mutex_unlock(&p->borrowed_lock);
    return st;
}

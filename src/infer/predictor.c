/* The predictor: a loaded, optimised graph shared by clones, and a pool of
 * idle executors so that concurrent runs each get their own arena. */
#include "../graph/ir.h"
#include "../exec/exec.h"
#include "predictor.h"

#include <oar/infer.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

/* The graph packed for one batch size (predictor_config.batches), with
 * the compiled kernels every executor of it runs (NULL: unfused). */
typedef struct variant {
    int64_t batch;
    oar_graph *g;
    oari_fusion *fusion;
} variant;

typedef struct model {
    int refcount; /* atomic */
    int n_var;    /* atomic: var[0 .. n_var - 1] are complete (adapt_batches appends) */
    variant var[OAR_PREDICTOR_MAX_BATCHES];
    int batch_input; /* the input whose first dim picks the variant; -1: one variant */
    /* adapt_batches: the optimised graph before the passes that depend on
     * the batch, cloned for each new size; NULL when sizes are fixed (or
     * once packing one failed) */
    oar_graph *base;
    oar_predictor_config cfg; /* what prepare_variant reads (no pointers kept) */
    bool own;                 /* the predictor's own passes run (optimize, no pass list) */
    pthread_mutex_t grow;     /* serialises appending a variant */
} model;

/* A new executor of variant v, with its compiled kernels. */
static oar_executor *new_executor(const variant *v) {
    oar_executor *ex = oar_executor_new(v->g);
    if (ex && v->fusion && oari_executor_use_fusion(ex, v->fusion)) {
        oar_executor_free(ex);
        return NULL;
    }
    return ex;
}

static void model_free(model *m) {
    for (int k = 0; k < m->n_var; k++) {
        oari_fusion_free(m->var[k].fusion);
        oar_graph_free(m->var[k].g);
    }
    oar_graph_free(m->base);
    pthread_mutex_destroy(&m->grow);
    oari_free(m, sizeof *m);
}

/* Idle executors of one variant. */
typedef struct idle_set {
    oar_executor **a;
    int n, cap;
} idle_set;

struct oar_predictor {
    model *m;
    int num_threads;
    pthread_mutex_t lock;          /* guards idle[] */
    idle_set idle[OAR_PREDICTOR_MAX_BATCHES];
    pthread_mutex_t borrowed_lock; /* serialises run_borrowed */
    oar_executor *borrowed[OAR_PREDICTOR_MAX_BATCHES];
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
 * threads asked for other blocks than 2) and for `batch`, then pools
 * without their unused indices. *packed gets the number of convs packed. */
static int run_own_passes(oar_graph *g, const oar_predictor_config *cfg, int64_t batch, int *packed) {
    int saved = omp_get_max_threads();
    if (cfg->num_threads > 0) omp_set_num_threads(cfg->num_threads);
    int st = run_pass_list(g, "fuse_qlinear", cfg->print_passes);
    int r = st ? st : after_pass(g, "prepack_conv", oari_pass_prepack_conv_at(g, batch), cfg->print_passes);
    *packed = r > 0 ? r : 0;
    st = r < 0 ? r : run_pass_list(g, "pool_values", cfg->print_passes);
    if (cfg->num_threads > 0) omp_set_num_threads(saved);
    return st;
}

/* The first input whose first dim is dynamic (the batch), or -1. */
static int batch_input_of(const oar_graph *g) {
    for (int i = 0; i < g->n_inputs; i++) {
        const oari_gvalue *v = &g->values[g->inputs[i]];
        if (v->ndim > 0 && v->sym[0] >= 0) return i;
    }
    return -1;
}

/* Compiles v's fusible ops once; every executor shares the kernels. */
static int compile_variant(variant *v) {
    oar_executor *ex = oar_executor_new(v->g);
    int st = ex ? oar_executor_compile(ex) : oari_fail_status();
    if (st == OAR_ERR_IO) { /* an unwritable kernel cache: serve unfused rather than not at all */
        oari_log(OAR_LOG_WARN, "predictor", "%s; the model runs unfused", oar_last_error());
        oar_clear_error();
        st = 0;
    }
    if (!st) v->fusion = oari_fusion_retain(oari_executor_fusion(ex));
    oar_executor_free(ex);
    return st;
}

/* Runs the predictor's own passes on v's graph at its batch (where m
 * optimises with the default list) and compiles it (unless no_compile);
 * *packed: the convs packed. */
static int prepare_variant(variant *v, const model *m, int *packed) {
    *packed = 0;
    int st = m->own ? run_own_passes(v->g, &m->cfg, v->batch, packed) : 0;
    if (!st && !m->cfg.no_compile) st = compile_variant(v);
    return st;
}

/* The model of g (owned), optimised as cfg asks: one variant per batch
 * size of cfg (only the first where nothing depends on the batch). */
static model *model_of(oar_graph *g, const oar_predictor_config *cfg) {
    if (cfg->passes && run_pass_list(g, cfg->passes, cfg->print_passes)) {
        oar_graph_free(g);
        return NULL;
    }
    if (!cfg->passes && cfg->optimize &&
        oar_graph_optimize(g, OAR_PASSES_INFERENCE, cfg->print_passes ? OAR_PASS_PRINT : 0)) {
        oar_graph_free(g);
        return NULL;
    }
    model *m = oari_calloc(1, sizeof *m);
    if (!m) {
        oar_graph_free(g);
        return NULL;
    }
    pthread_mutex_init(&m->grow, NULL);
    /* quantized linear layers into qlinear nodes: the predictor's alone, as
     * no exporter maps qlinear (docs/quantization.md); convs on packed
     * weights; pools without their unused indices (no gradient here) */
    m->own = !cfg->passes && cfg->optimize;
    m->cfg = *cfg;
    m->cfg.model_dir = m->cfg.passes = NULL;
    m->cfg.batches = NULL;
    const int64_t one = cfg->batch > 0 ? cfg->batch : 1;
    const int64_t *sizes = cfg->n_batches ? cfg->batches : &one;
    const int n = cfg->n_batches ? cfg->n_batches : 1;
    m->batch_input = n > 1 || cfg->adapt_batches ? batch_input_of(g) : -1;
    int st = 0;
    if (m->batch_input >= 0 && cfg->adapt_batches && !(m->base = oar_graph_clone(g))) st = oari_fail_status();
    for (int k = 0; k < n && !st; k++) {
        /* the base graph g goes to the last variant; the others copy it */
        bool last = k == n - 1 || m->batch_input < 0;
        variant *v = &m->var[m->n_var];
        v->batch = sizes[k];
        v->g = last ? g : oar_graph_clone(g);
        if (last) g = NULL;
        if (!v->g) {
            st = oari_fail_status();
            break;
        }
        m->n_var++;
        int packed = 0;
        st = prepare_variant(v, m, &packed);
        if (!packed) m->batch_input = -1; /* nothing depends on the batch: this one serves all */
        if (m->batch_input < 0) break;
    }
    oar_graph_free(g); /* (NULL once a variant took it) */
    if (m->batch_input < 0) { /* (nothing to adapt) */
        oar_graph_free(m->base);
        m->base = NULL;
    }
    if (st) {
        model_free(m);
        return NULL;
    }
    return m;
}

/* Appends m's variant for batch b (adapt_batches), unless another thread
 * did first or the variants are all used; its index, or 0 (the first
 * variant serves) where none is made. A variant that fails to pack or
 * compile is a warning, not a failed run: the run takes the first
 * variant, and the model stops adapting. */
static int grow(model *m, int64_t b) {
    pthread_mutex_lock(&m->grow);
    const int n = __atomic_load_n(&m->n_var, __ATOMIC_ACQUIRE);
    int k = -1;
    for (int j = 0; j < n; j++)
        if (m->var[j].batch == b) k = j;
    if (k < 0 && m->base && n < OAR_PREDICTOR_MAX_BATCHES) {
        variant *v = &m->var[n];
        *v = (variant){.batch = b, .g = oar_graph_clone(m->base)};
        int packed = 0;
        int st = v->g ? prepare_variant(v, m, &packed) : oari_fail_status();
        if (st) {
            oari_log(OAR_LOG_WARN, "predictor", "packing for batch %lld failed (%s); runs at sizes without a "
                     "packing take batch %lld's from now on", (long long)b, oar_last_error(),
                     (long long)m->var[0].batch);
            oar_clear_error();
            oari_fusion_free(v->fusion);
            oar_graph_free(v->g);
            *v = (variant){0};
            oar_graph *base = m->base;
            __atomic_store_n(&m->base, NULL, __ATOMIC_RELEASE);
            oar_graph_free(base);
        } else {
            __atomic_store_n(&m->n_var, n + 1, __ATOMIC_RELEASE);
            k = n;
        }
    }
    pthread_mutex_unlock(&m->grow);
    return k < 0 ? 0 : k;
}

static oar_predictor *from_owned_graph(oar_graph *g, const oar_predictor_config *cfg) {
    if (!g) return NULL;
    model *m = model_of(g, cfg);
    oar_predictor *p = m ? wrap(m, cfg->num_threads) : NULL;
    if (m && !p) model_free(m);
    return p;
}

/* cfg's numbers, checked for `fn`; 0 or a status. */
static int check_config(const char *fn, const oar_predictor_config *cfg) {
    if (cfg->num_threads < 0) return oari_error(OAR_ERR_INVALID, "%s: num_threads %d < 0", fn, cfg->num_threads);
    if (cfg->batch < 0) return oari_error(OAR_ERR_INVALID, "%s: batch %lld < 0", fn, (long long)cfg->batch);
    if (cfg->n_batches < 0 || cfg->n_batches > OAR_PREDICTOR_MAX_BATCHES || (cfg->n_batches && !cfg->batches))
        return oari_error(OAR_ERR_INVALID, "%s: n_batches %d with batches %s (want 0..%d sizes)", fn, cfg->n_batches,
                          cfg->batches ? "given" : "NULL", OAR_PREDICTOR_MAX_BATCHES);
    if (cfg->n_batches && cfg->batch)
        return oari_error(OAR_ERR_INVALID, "%s: both batch (%lld) and batches are set; give one", fn,
                          (long long)cfg->batch);
    for (int k = 0; k < cfg->n_batches; k++) {
        if (cfg->batches[k] < 1)
            return oari_error(OAR_ERR_INVALID, "%s: batches[%d] is %lld (want >= 1)", fn, k,
                              (long long)cfg->batches[k]);
        for (int j = 0; j < k; j++)
            if (cfg->batches[j] == cfg->batches[k])
                return oari_error(OAR_ERR_INVALID, "%s: batches[%d] and batches[%d] are both %lld", fn, j, k,
                                  (long long)cfg->batches[k]);
    }
    return 0;
}

oar_predictor *oar_predictor_create(const oar_predictor_config *cfg) {
    if (!cfg || !cfg->model_dir)
        return oari_error(OAR_ERR_INVALID, "predictor_create: config or model_dir is NULL"), NULL;
    if (check_config("predictor_create", cfg)) return NULL;
    return from_owned_graph(oar_graph_load(cfg->model_dir), cfg);
}

oar_predictor *oar_predictor_from_graph(const oar_graph *g, const oar_predictor_config *cfg) {
    static const oar_predictor_config none;
    if (!g) return oari_error(OAR_ERR_INVALID, "predictor_from_graph: graph is NULL"), NULL;
    if (!cfg) cfg = &none;
    if (check_config("predictor_from_graph", cfg)) return NULL;
    return from_owned_graph(oar_graph_clone(g), cfg);
}

oar_predictor *oar_predictor_clone(oar_predictor *p) {
    if (!p) return oari_error(OAR_ERR_INVALID, "predictor_clone: predictor is NULL"), NULL;
    return wrap(p->m, p->num_threads);
}

void oar_predictor_free(oar_predictor *p) {
    if (!p) return;
    for (int k = 0; k < OAR_PREDICTOR_MAX_BATCHES; k++) {
        for (int i = 0; i < p->idle[k].n; i++) oar_executor_free(p->idle[k].a[i]);
        oari_free(p->idle[k].a, (size_t)p->idle[k].cap * sizeof *p->idle[k].a);
        oar_executor_free(p->borrowed[k]);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->borrowed_lock);
    if (__atomic_sub_fetch(&p->m->refcount, 1, __ATOMIC_ACQ_REL) == 0) model_free(p->m);
    oari_free(p, sizeof *p);
}

const oar_graph *oar_predictor_graph(const oar_predictor *p) {
    return p ? p->m->var[0].g : (oari_null_arg(__func__, "predictor"), NULL);
}
bool oar_predictor_is_compiled(const oar_predictor *p) {
    return p ? (p->m->var[0].fusion && p->m->var[0].fusion->n_kernels) : (oari_null_arg(__func__, "predictor"), false);
}
int oar_predictor_num_inputs(const oar_predictor *p) {
    return p ? oar_graph_num_inputs(p->m->var[0].g) : (oari_null_arg(__func__, "predictor"), -1);
}
int oar_predictor_num_outputs(const oar_predictor *p) {
    return p ? oar_graph_num_outputs(p->m->var[0].g) : (oari_null_arg(__func__, "predictor"), -1);
}
const char *oar_predictor_input_name(const oar_predictor *p, int i) {
    return p ? oar_graph_input_name(p->m->var[0].g, i) : (oari_null_arg(__func__, "predictor"), NULL);
}
const char *oar_predictor_output_name(const oar_predictor *p, int i) {
    return p ? oar_graph_output_name(p->m->var[0].g, i) : (oari_null_arg(__func__, "predictor"), NULL);
}
int oar_predictor_input_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape) {
    return p ? oar_graph_input_shape(p->m->var[0].g, i, dtype, shape) : (oari_null_arg(__func__, "predictor"), -1);
}
int oar_predictor_output_shape(const oar_predictor *p, int i, oar_dtype *dtype, int64_t *shape) {
    return p ? oar_graph_output_shape(p->m->var[0].g, i, dtype, shape) : (oari_null_arg(__func__, "predictor"), -1);
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

/* The variant of m that serves these inputs: the one packed for their
 * batch (with adapt_batches, packed now where there is none yet), else the
 * first. */
static int pick(model *m, oar_tensor *const *inputs) {
    const int i = m->batch_input;
    if (i < 0 || !inputs || !inputs[i] || inputs[i]->ndim < 1) return 0;
    const oari_gvalue *v = &m->var[0].g->values[m->var[0].g->inputs[i]];
    const int64_t b = inputs[i]->shape[0] / (v->smul[0] > 0 ? v->smul[0] : 1);
    const int n = __atomic_load_n(&m->n_var, __ATOMIC_ACQUIRE);
    for (int k = 0; k < n; k++)
        if (m->var[k].batch == b) return k;
    return b >= 1 && __atomic_load_n(&m->base, __ATOMIC_ACQUIRE) ? grow(m, b) : 0;
}

int oar_predictor_run(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs) {
    if (!p || !outputs) return oari_error(OAR_ERR_INVALID, "predictor_run: predictor or outputs is NULL");
    const int k = pick(p->m, inputs);
    const oar_graph *g = p->m->var[k].g;
    idle_set *idle = &p->idle[k];
    pthread_mutex_lock(&p->lock);
    oar_executor *ex = idle->n ? idle->a[--idle->n] : NULL;
    pthread_mutex_unlock(&p->lock);
    if (!ex && !(ex = new_executor(&p->m->var[k]))) return oari_fail_status();
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
    if (idle->n == idle->cap) {
        int nc = idle->cap ? idle->cap * 2 : 4;
        oar_executor **a = oari_realloc(idle->a, (size_t)idle->cap * sizeof *a, (size_t)nc * sizeof *a);
        if (a) {
            idle->a = a;
            idle->cap = nc;
        }
    }
    if (idle->n < idle->cap) idle->a[idle->n++] = ex;
    else oar_executor_free(ex);
    pthread_mutex_unlock(&p->lock);
    return st;
}

int oar_predictor_run_borrowed(oar_predictor *p, oar_tensor *const *inputs, oar_tensor **outputs) {
    if (!p || !outputs) return oari_error(OAR_ERR_INVALID, "predictor_run_borrowed: predictor or outputs is NULL");
    const int k = pick(p->m, inputs);
    pthread_mutex_lock(&p->borrowed_lock);
    int st = 0;
    if (!p->borrowed[k] && !(p->borrowed[k] = new_executor(&p->m->var[k]))) st = oari_fail_status();
    if (!st) st = run_on(p, p->borrowed[k], inputs, outputs);
    pthread_mutex_unlock(&p->borrowed_lock);
    return st;
}

const oar_graph *oari_predictor_graph_for(const oar_predictor *p, oar_tensor *const *inputs) {
    return p->m->var[pick(p->m, inputs)].g;
}

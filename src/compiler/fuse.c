/* Grouping nodes into kernels (compiler.h).
 *
 * Walking the graph backwards, a fusible node joins the kernel of its
 * consumers when they all belong to one kernel and its output is not a
 * graph output; otherwise its output is materialised and it roots a kernel
 * of its own (a view, which computes nothing, is then left to the
 * executor). So an elementwise chain is one kernel, a value read by two
 * members of one kernel is computed once inside it, and a value needed by a
 * GEMM or by two kernels is written to memory once. The code generator may
 * refuse a member (a reduction it would have to recompute per element);
 * that member then roots its own kernel and the grouping runs again. A
 * kernel of one node is left to the library kernel, unless the node is a
 * reduction of a contiguous buffer: generated, a sum over leading dims runs
 * across rows (43 such sums of the character transformer's step take 2.6 ms
 * generated against 4.3 ms in the library: BENCH_KERNELS=2
 * bench_compiled_step). */
#include "compiler.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

typedef struct uses {
    int *start;  /* per value: first index into idx */
    int *idx;    /* consumer node ids */
    bool *is_output;
} uses;

static int build_uses(const oar_graph *g, uses *u) {
    int nv = g->n_values, nn = g->n_nodes, total = 0;
    for (int i = 0; i < nn; i++) total += g->nodes[i].n_in;
    u->start = oari_calloc((size_t)nv + 1, sizeof *u->start);
    u->idx = oari_malloc((size_t)(total ? total : 1) * sizeof *u->idx);
    u->is_output = oari_calloc((size_t)(nv ? nv : 1), sizeof *u->is_output);
    if (!u->start || !u->idx || !u->is_output) return oari_fail_status();
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) u->start[g->nodes[i].in[k] + 1]++;
    for (int v = 0; v < nv; v++) u->start[v + 1] += u->start[v];
    int *fill = oari_calloc((size_t)(nv ? nv : 1), sizeof *fill);
    if (!fill) return oari_fail_status();
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0) u->idx[u->start[v] + fill[v]++] = i;
        }
    oari_free(fill, (size_t)(nv ? nv : 1) * sizeof *fill);
    for (int j = 0; j < g->n_outputs; j++) u->is_output[g->outputs[j]] = true;
    return 0;
}

static void free_uses(const oar_graph *g, uses *u) {
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++) total += g->nodes[i].n_in;
    oari_free(u->start, ((size_t)g->n_values + 1) * sizeof *u->start);
    oari_free(u->idx, (size_t)(total ? total : 1) * sizeof *u->idx);
    oari_free(u->is_output, (size_t)(g->n_values ? g->n_values : 1) * sizeof *u->is_output);
}

static bool is_view(const oar_graph *g, int n) { return oari_gnode_def(&g->nodes[n])->flags & OARI_F_VIEW; }

/* kr[n]: the root of n's kernel, or -1 (n runs its own library kernel or
 * is a view left to the executor). count: scratch, n_nodes entries. */
static void assign_roots(const oar_graph *g, const uses *u, const bool *fusible, const bool *own_root,
                         int *kr, int *count) {
    for (int n = g->n_nodes - 1; n >= 0; n--) {
        kr[n] = -1;
        if (!fusible[n]) continue;
        int v = g->nodes[n].out[0], common = -2;
        bool joins = !own_root[n] && !u->is_output[v] && u->start[v + 1] > u->start[v];
        for (int k = u->start[v]; k < u->start[v + 1] && joins; k++) {
            int r = kr[u->idx[k]];
            if (r < 0 || (common >= 0 && r != common)) joins = false;
            common = r;
        }
        if (joins) kr[n] = common;
        else if (!is_view(g, n)) kr[n] = n;
    }
    /* one computing node is no fusion: leave it (and its views) unfused */
    memset(count, 0, (size_t)g->n_nodes * sizeof *count);
    for (int i = 0; i < g->n_nodes; i++)
        if (kr[i] >= 0 && !is_view(g, i)) count[kr[i]]++;
    for (int r = 0; r < g->n_nodes; r++) {
        if (kr[r] != r) continue;
        int computing = count[r];
        const oari_gnode *n = &g->nodes[r];
        /* a reduction of a view (a transposed matmul result) reads strided: the
         * library kernel walks memory in order instead */
        int x = n->in[0];
        bool reduction = (n->op == OARI_OP_sum || n->op == OARI_OP_amax || n->op == OARI_OP_amin) &&
                         !(g->values[x].kind == OARI_V_NODE && is_view(g, g->values[x].producer));
        if (computing < 2 && !(computing == 1 && reduction)) count[r] = -1; /* dissolve below */
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (kr[i] >= 0 && count[kr[i]] < 0) kr[i] = -1;
}

oari_fusion *oari_fusion_retain(oari_fusion *f) {
    if (f) __atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL);
    return f;
}

void oari_fusion_free(oari_fusion *f) {
    if (!f || __atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    for (int k = 0; k < f->n_kernels; k++) oari_free(f->kernels[k].args, (size_t)f->kernels[k].n_args * sizeof(int));
    oari_free(f->kernels, (size_t)f->cap_kernels * sizeof *f->kernels);
    oari_free(f->kernel_of, (size_t)(f->n_nodes ? f->n_nodes : 1) * sizeof *f->kernel_of);
    oari_sbuf_free(&f->source);
    for (int u = 0; u < f->n_libs; u++) oari_jit_release(f->libs[u]);
    oari_free(f->libs, (size_t)f->n_libs * sizeof *f->libs);
    oari_free(f, sizeof *f);
}

/* Kernel k's function in f's source, its name excluded: *pre is the text
 * from the end of the kernel's comment to the name, *post what follows the
 * name. False when the text has no such shape. */
static bool function_text(const oari_fusion *f, int k, const char **pre, size_t *n_pre, const char **post,
                          size_t *n_post) {
    const oari_kernel *K = &f->kernels[k];
    const char *all = oari_sbuf_str(&f->source), *end = all + K->src_end;
    const char *c = strstr(all + K->src_begin, "*/\n");
    size_t len = strlen(K->name);
    const char *name = c ? strstr(c, K->name) : NULL;
    if (!name || name + len >= end || name[len] != '(') return false;
    *pre = c + 3;
    *n_pre = (size_t)(name - *pre);
    *post = name + len;
    *n_post = (size_t)(end - *post);
    return true;
}

/* Kernel k (the last written) calls the function of an earlier kernel
 * whose code is the same but for the name (the SGD update of every
 * parameter of a shape, a layer's norm in each of its copies): its own text
 * shrinks to its comment. Fewer functions are fewer cold instruction
 * fetches per step, which for a kernel of a microsecond is most of its
 * time, and less to compile. */
static void share_code(oari_fusion *f, int k) {
    oari_kernel *K = &f->kernels[k];
    K->code = k;
    const char *pre, *post;
    size_t n_pre, n_post;
    if (f->source.failed || !function_text(f, k, &pre, &n_pre, &post, &n_post)) return;
    for (int j = 0; j < k; j++) {
        const char *pj, *qj;
        size_t npj, nqj;
        if (f->kernels[j].code != j || !function_text(f, j, &pj, &npj, &qj, &nqj)) continue;
        if (npj != n_pre || nqj != n_post || memcmp(pj, pre, n_pre) || memcmp(qj, post, n_post)) continue;
        K->code = j;
        f->source.len = (size_t)(pre - f->source.s); /* keep the comment */
        f->source.s[f->source.len] = '\0';
        oari_sbuf_printf(&f->source, "/* (%s runs %s's code) */\n", K->name, f->kernels[j].name);
        K->src_end = f->source.len;
        return;
    }
}

int oari_fuse_graph(const oar_graph *g, const oari_renderer *r, oari_fusion **out) {
    if (!g || !out) return oari_error(OAR_ERR_INVALID, "compiler: graph or result is NULL");
    *out = NULL;
    int nn = g->n_nodes, st = 0;
    size_t nb = (size_t)(nn ? nn : 1);
    uses u = {0};
    bool *fusible = oari_calloc(nb, sizeof *fusible), *own_root = oari_calloc(nb, sizeof *own_root);
    int *kr = oari_malloc(nb * sizeof *kr), *count = oari_malloc(nb * sizeof *count);
    oari_fusion *f = oari_calloc(1, sizeof *f);
    if (!fusible || !own_root || !kr || !count || !f || (st = build_uses(g, &u))) {
        st = st ? st : oari_fail_status();
        goto done;
    }
    f->n_nodes = nn;
    f->refs = 1;
    f->renderer = r;
    if (!(f->kernel_of = oari_malloc(nb * sizeof *f->kernel_of))) {
        st = oari_fail_status();
        goto done;
    }
    for (int n = 0; n < nn; n++) fusible[n] = oari_fusible(g, n);
    /* group, generate; when the generator refuses a member, take it out and
     * group again (each round removes one node from some kernel) */
    for (int round = 0; round <= nn; round++) {
        assign_roots(g, &u, fusible, own_root, kr, count);
        for (int k = 0; k < f->n_kernels; k++) oari_free(f->kernels[k].args, (size_t)f->kernels[k].n_args * sizeof(int));
        oari_free(f->kernels, (size_t)f->cap_kernels * sizeof *f->kernels);
        f->kernels = NULL;
        f->n_kernels = f->cap_kernels = 0;
        oari_sbuf_free(&f->source);
        int n_roots = 0;
        for (int n = 0; n < nn; n++) n_roots += kr[n] == n;
        if (!(f->kernels = oari_calloc((size_t)(n_roots ? n_roots : 1), sizeof *f->kernels))) {
            st = oari_fail_status();
            goto done;
        }
        f->cap_kernels = n_roots ? n_roots : 1;
        r->prelude(&f->source);
        f->prelude_len = f->source.len;
        bool retry = false;
        for (int n = 0; n < nn && !retry; n++) {
            if (kr[n] != n) continue;
            oari_kernel *k = &f->kernels[f->n_kernels];
            snprintf(k->name, sizeof k->name, "oar_k%d", f->n_kernels);
            k->root = n;
            int bad = -1;
            k->src_begin = f->source.len;
            st = oari_codegen_kernel(g, r, kr, n, k->name, &f->source, &k->args, &k->n_args, &bad,
                                     &k->flat, &k->outer_mask, &k->same_index);
            k->src_end = f->source.len;
            if (st < 0) goto done;
            if (st == 1) {
                st = 0;
                retry = true;
                if (bad == n || bad < 0) fusible[n] = false; /* cannot root a kernel: run it unfused */
                else own_root[bad] = true;
                continue;
            }
            share_code(f, f->n_kernels);
            f->n_kernels++;
        }
        if (!retry) break;
    }
    if (f->source.failed) {
        st = oari_fail_status();
        goto done;
    }
    for (int n = 0; n < nn; n++) f->kernel_of[n] = -1;
    for (int k = 0; k < f->n_kernels; k++) f->kernel_of[f->kernels[k].root] = k;
    for (int n = 0; n < nn; n++) /* members come before their root */
        if (kr[n] >= 0 && f->kernel_of[kr[n]] >= 0) {
            f->kernel_of[n] = f->kernel_of[kr[n]];
            f->kernels[f->kernel_of[n]].n_members++;
        }
    f->n_launches = f->n_kernels;
    for (int n = 0; n < nn; n++) f->n_launches += f->kernel_of[n] < 0 && !is_view(g, n);
done:
    free_uses(g, &u);
    oari_free(fusible, nb * sizeof *fusible);
    oari_free(own_root, nb * sizeof *own_root);
    oari_free(kr, nb * sizeof *kr);
    oari_free(count, nb * sizeof *count);
    if (st) {
        if (f && !f->kernel_of) f->n_nodes = 0;
        oari_fusion_free(f);
        return st;
    }
    *out = f;
    return 0;
}

/* ---- building: units of kernels compiled by parallel jobs ------------------ */

typedef struct build_job {
    oari_fusion *f;
    int first_unit, stride;
    int failed_unit;          /* -1, or the unit whose build failed */
    int status;
    char error[512];          /* its message (errors are per thread) */
} build_job;

/* The source of unit u: the prelude and its kernels' functions. */
static char *unit_source(const oari_fusion *f, int u) {
    oari_sbuf b = {0};
    const char *all = oari_sbuf_str(&f->source);
    oari_sbuf_putn(&b, all, f->prelude_len);
    for (int k = 0; k < f->n_kernels; k++)
        if (f->kernels[k].code == k && f->kernels[k].unit == u)
            oari_sbuf_putn(&b, all + f->kernels[k].src_begin,
                           (size_t)(f->kernels[k].src_end - f->kernels[k].src_begin));
    if (b.failed) {
        oari_sbuf_free(&b);
        return NULL;
    }
    char *s = oari_strdup(oari_sbuf_str(&b));
    oari_sbuf_free(&b);
    return s;
}

static void *build_units(void *arg) {
    build_job *j = arg;
    for (int u = j->first_unit; u < j->f->n_libs && j->failed_unit < 0; u += j->stride) {
        char *src = unit_source(j->f, u);
        if (src) j->f->libs[u] = oari_jit_load(src, NULL);
        oari_strfree(src);
        if (!src || !j->f->libs[u]) {
            j->failed_unit = u;
            j->status = !src ? OAR_ERR_NOMEM : oari_last_status() ? oari_last_status() : OAR_ERR_INVALID;
            snprintf(j->error, sizeof j->error, "%s", oar_last_error());
        }
    }
    return NULL;
}

int oari_fusion_build(oari_fusion *f) {
    if (!f) return oari_error(OAR_ERR_INVALID, "compiler: fusion is NULL");
    if (!f->n_kernels || f->libs) return 0;
    if (!oari_jit_available())
        return oari_error(OAR_ERR_UNSUPPORTED, "compiler: no C compiler; the graph runs unfused");
    /* units of OARI_KERNELS_PER_UNIT functions (a kernel sharing another's
     * code adds none) */
    int n_functions = 0;
    for (int k = 0; k < f->n_kernels; k++)
        if (f->kernels[k].code == k) f->kernels[k].unit = n_functions++ / OARI_KERNELS_PER_UNIT;
    int n_units = (n_functions + OARI_KERNELS_PER_UNIT - 1) / OARI_KERNELS_PER_UNIT;
    if (!(f->libs = oari_calloc((size_t)n_units, sizeof *f->libs))) return oari_fail_status();
    f->n_libs = n_units;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n_jobs = (int)(cores < 1 ? 1 : cores > 8 ? 8 : cores);
    if (n_jobs > n_units) n_jobs = n_units;
    build_job jobs[8];
    pthread_t threads[8];
    bool started[8] = {false};
    for (int t = 0; t < n_jobs; t++) {
        jobs[t] = (build_job){.f = f, .first_unit = t, .stride = n_jobs, .failed_unit = -1};
        /* job 0 runs on this thread; a job whose thread cannot start runs here too */
        if (t > 0) started[t] = !pthread_create(&threads[t], NULL, build_units, &jobs[t]);
    }
    build_units(&jobs[0]);
    for (int t = 1; t < n_jobs; t++) {
        if (started[t]) pthread_join(threads[t], NULL);
        else build_units(&jobs[t]);
    }
    for (int t = 0; t < n_jobs; t++)
        if (jobs[t].failed_unit >= 0)
            return oari_error(jobs[t].status, "%s", jobs[t].error);
    for (int k = 0; k < f->n_kernels; k++) {
        int c = f->kernels[k].code; /* the kernel whose function it calls */
        void *p = oari_jit_symbol(f->libs[f->kernels[c].unit], f->kernels[c].name);
        if (!p) return OAR_ERR_INVALID;
        /* dlsym gives an object pointer; the kernel is a function (POSIX) */
        memcpy(&f->kernels[k].fn, &p, sizeof p);
    }
    return 0;
}

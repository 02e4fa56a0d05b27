/* Saved models: a folder with model.json (the graph, versioned, written
 * with cJSON) and weights.safetensors (the constants, through src/io).
 * Loading checks everything it reads and names the file and the problem.
 *
 * model.json, version 1:
 *   {"format": "oar.graph", "version": 1,
 *    "symbols": [{"name": "N", "trace_size": 1031}],
 *    "values": [{"kind": "input"|"const"|"node", "dtype": "float32",
 *                "shape": ["N", 8], "name": "x", "wrapped": false}, ...],
 *    "inputs": [0],
 *    "nodes": [{"op": "matmul", "in": [0, 3], "out": [4],
 *               "i": ["N", 64], "f": [1e-05, "nan"]}, ...],
 *    "outputs": [{"name": "y", "value": 9}]}
 * Version 2 (written when the graph has control nodes): a "cond" or "while"
 * node also has "graphs": [two objects with "values", "inputs", "nodes" and
 * "outputs" as above (no constants; the top graph's symbols)], its
 * sub-graphs (ir.h). Version 1 files load as before.
 * A shape entry or integer attribute that is a string names a symbol (a
 * dynamic dim); other integers beyond 2^53 are written as decimal strings;
 * non-finite doubles as "nan", "inf", "-inf". Constants are stored in the
 * safetensors file under their value's "name". */
#include "ir.h"

#include "../io/json.h"
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <oar/io.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_NAME "oar.graph"
#define FORMAT_VERSION 1
#define FORMAT_VERSION_CTRL 2 /* graphs with control nodes */
#define MAX_NESTING 16        /* sub-graphs inside sub-graphs */

static const char *kind_names[] = {"node", "input", "const"};

static cJSON *int_json(const oar_graph *g, int64_t v, int sym, int32_t mul) {
    if (sym >= 0 && mul != 1) {
        char buf[96];
        snprintf(buf, sizeof buf, "%d*%s", (int)mul, g->syms[sym].name);
        return cJSON_CreateString(buf);
    }
    if (sym >= 0) return cJSON_CreateString(g->syms[sym].name);
    if (v > ((int64_t)1 << 53) || v < -((int64_t)1 << 53)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)v);
        return cJSON_CreateString(buf);
    }
    return cJSON_CreateNumber((double)v);
}

static cJSON *double_json(double f) {
    if (isnan(f)) return cJSON_CreateString("nan");
    if (isinf(f)) return cJSON_CreateString(f > 0 ? "inf" : "-inf");
    return cJSON_CreateNumber(f);
}

/* Adds item to arr; false (and item freed) if item is NULL. */
static bool push(cJSON *arr, cJSON *item) {
    if (!item) return false;
    cJSON_AddItemToArray(arr, item);
    return true;
}

/* The safetensors key of constant v: its name, made unique with ".v<id>". */
static void const_key(const oar_graph *g, int v, char *buf, size_t n) {
    const char *name = g->values[v].name ? g->values[v].name : "c";
    bool dup = false;
    for (int w = 0; w < g->n_values && !dup; w++)
        dup = w != v && g->values[w].kind == OARI_V_CONST && g->values[w].name &&
              !strcmp(g->values[w].name, name);
    if (dup) snprintf(buf, n, "%s.v%d", name, v);
    else snprintf(buf, n, "%s", name);
}

static bool has_ctrl(const oar_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && oari_is_ctrl(g->nodes[i].op)) return true;
    return false;
}

/* Adds g's "values", "inputs", "nodes" and "outputs" to root (control
 * nodes with their "graphs"); false on failure. */
static bool body_json(const oar_graph *g, cJSON *root) {
    bool ok = true;
    cJSON *vals = cJSON_AddArrayToObject(root, "values");
    for (int v = 0; ok && vals && v < g->n_values; v++) {
        const oari_gvalue *gv = &g->values[v];
        cJSON *o = cJSON_CreateObject();
        ok = push(vals, o) && cJSON_AddStringToObject(o, "kind", kind_names[gv->kind]) &&
             cJSON_AddStringToObject(o, "dtype", oar_dtype_name(gv->dtype));
        cJSON *sh = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
        ok = ok && sh;
        for (int d = 0; ok && d < gv->ndim; d++) ok = push(sh, int_json(g, gv->shape[d], gv->sym[d], gv->smul[d]));
        if (ok && gv->kind == OARI_V_CONST) {
            char key[512];
            const_key(g, v, key, sizeof key);
            ok = cJSON_AddStringToObject(o, "name", key) &&
                 cJSON_AddBoolToObject(o, "wrapped", gv->constant->wrapped_number);
        } else if (ok && gv->name) {
            ok = cJSON_AddStringToObject(o, "name", gv->name) != NULL;
        }
    }
    cJSON *ins = cJSON_AddArrayToObject(root, "inputs");
    for (int i = 0; ok && ins && i < g->n_inputs; i++) ok = push(ins, cJSON_CreateNumber(g->inputs[i]));
    cJSON *nodes = cJSON_AddArrayToObject(root, "nodes");
    for (int i = 0; ok && nodes && i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        cJSON *o = cJSON_CreateObject();
        ok = push(nodes, o) && cJSON_AddStringToObject(o, "op", oari_gnode_def(n)->name);
        cJSON *a = ok ? cJSON_AddArrayToObject(o, "in") : NULL;
        for (int k = 0; ok && a && k < n->n_in; k++) ok = push(a, cJSON_CreateNumber(n->in[k]));
        cJSON *b = ok ? cJSON_AddArrayToObject(o, "out") : NULL;
        for (int j = 0; ok && b && j < n->n_out; j++) ok = push(b, cJSON_CreateNumber(n->out[j]));
        cJSON *ia = ok ? cJSON_AddArrayToObject(o, "i") : NULL;
        for (int k = 0; ok && ia && k < n->attrs.ni; k++) ok = push(ia, int_json(g, n->attrs.i[k], n->isym[k], n->imul[k]));
        cJSON *fa = ok ? cJSON_AddArrayToObject(o, "f") : NULL;
        for (int k = 0; ok && fa && k < n->attrs.nf; k++) ok = push(fa, double_json(n->attrs.f[k]));
        ok = ok && a && b && ia && fa;
        cJSON *subs = ok && oari_is_ctrl(n->op) ? cJSON_AddArrayToObject(o, "graphs") : NULL;
        for (int k = 0; ok && subs && k < 2; k++) {
            cJSON *so = cJSON_CreateObject();
            ok = push(subs, so) && body_json(n->sub[k], so);
        }
        ok = ok && (subs || !oari_is_ctrl(n->op));
    }
    cJSON *outs = cJSON_AddArrayToObject(root, "outputs");
    for (int j = 0; ok && outs && j < g->n_outputs; j++) {
        cJSON *o = cJSON_CreateObject();
        ok = push(outs, o) && cJSON_AddStringToObject(o, "name", g->output_names[j]) &&
             cJSON_AddNumberToObject(o, "value", g->outputs[j]);
    }
    return ok && vals && ins && nodes && outs;
}

static cJSON *graph_json(const oar_graph *g) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    bool ok = cJSON_AddStringToObject(root, "format", FORMAT_NAME) &&
              cJSON_AddNumberToObject(root, "version", has_ctrl(g) ? FORMAT_VERSION_CTRL : FORMAT_VERSION);
    cJSON *syms = cJSON_AddArrayToObject(root, "symbols");
    for (int s = 0; ok && syms && s < g->n_syms; s++) {
        cJSON *o = cJSON_CreateObject();
        ok = push(syms, o) && cJSON_AddStringToObject(o, "name", g->syms[s].name) &&
             cJSON_AddNumberToObject(o, "trace_size", (double)g->syms[s].trace_size);
    }
    if (!ok || !syms || !body_json(g, root)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int oar_graph_save(const oar_graph *g, const char *dir) {
    oari_json_init();
    if (!g || !dir) return oari_error(OAR_ERR_INVALID, "graph_save: graph or folder is NULL");
    if (mkdir(dir, 0777) && errno != EEXIST)
        return oari_error(OAR_ERR_IO, "graph_save: cannot create folder %s: %s", dir, strerror(errno));
    /* weights first: a model.json never points at weights that were not written */
    int nc = oar_graph_num_constants(g), k = 0, st = 0;
    char **names = oari_calloc((size_t)(nc ? nc : 1), sizeof *names);
    oar_tensor **ts = oari_calloc((size_t)(nc ? nc : 1), sizeof *ts);
    size_t plen = strlen(dir) + 32;
    char *path = oari_malloc(plen), *tmp = oari_malloc(plen + 8);
    if (!names || !ts || !path || !tmp) st = oari_fail_status();
    for (int v = 0; v < g->n_values && !st; v++) {
        if (g->values[v].kind != OARI_V_CONST) continue;
        char key[512];
        const_key(g, v, key, sizeof key);
        if (!(names[k] = oari_strdup(key))) st = oari_fail_status();
        ts[k++] = g->values[v].constant;
    }
    if (!st) {
        snprintf(path, plen, "%s/weights.safetensors", dir);
        st = oar_safetensors_save(path, k, (const char *const *)names, ts);
    }
    char *text = NULL;
    if (!st) {
        cJSON *j = graph_json(g);
        text = j ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!text) st = oari_nomem("graph_save: model.json");
    }
    if (!st) {
        snprintf(path, plen, "%s/model.json", dir);
        snprintf(tmp, plen + 8, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        size_t len = strlen(text);
        bool ok = f && fwrite(text, 1, len, f) == len;
        if (f && fclose(f)) ok = false;
        if (!ok || rename(tmp, path)) {
            unlink(tmp);
            st = oari_error(OAR_ERR_IO, "graph_save: cannot write %s: %s", path, strerror(errno));
        }
    }
    cJSON_free(text);
    for (int i = 0; names && i < k; i++) oari_strfree(names[i]);
    oari_free(names, (size_t)(nc ? nc : 1) * sizeof *names);
    oari_free(ts, (size_t)(nc ? nc : 1) * sizeof *ts);
    oari_free(path, plen);
    oari_free(tmp, plen + 8);
    return st;
}

/* ---- loading ------------------------------------------------------------------ */

typedef struct loader {
    const char *file;
    oar_graph *g;             /* the graph being read (a sub-graph while reading one) */
    int version, depth;
    char where[256];          /* "" or the path to the sub-graph being read ("node 3 (while) body: ") */
    const oar_tensor_dict *w;
    const char *wfile;
} loader;

/* Reports an OAR_ERR_IO error; returns -1. */
OARI_PRINTF(1, 2) static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oari_verror(OAR_ERR_IO, fmt, ap);
    va_end(ap);
    return -1;
}

/* An integer entry: a number, a symbol name ("N" or "5*N"), or a decimal string. */
static int read_int(loader *L, const cJSON *j, int64_t *v, int8_t *sym, int32_t *mul, const char *what) {
    *sym = -1;
    *mul = 1;
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d != floor(d) || fabs(d) > 9.007199254740992e15)
            return fail("%s: %s is not an integer (%g)", L->file, what, d);
        *v = (int64_t)d;
        return 0;
    }
    if (!cJSON_IsString(j)) return fail("%s: %s is not a number or a symbol", L->file, what);
    const char *name = j->valuestring, *star = strchr(name, '*');
    long k = 1;
    if (star) {
        char *end;
        k = strtol(name, &end, 10);
        if (end != star || k < 1 || k > INT32_MAX)
            return fail("%s: %s has a bad symbolic size \"%s\"", L->file, what, name);
        name = star + 1;
    }
    for (int s = 0; s < L->g->n_syms; s++)
        if (!strcmp(L->g->syms[s].name, name)) {
            *sym = (int8_t)s;
            *mul = (int32_t)k;
            *v = k * L->g->syms[s].trace_size;
            return 0;
        }
    if (star) return fail("%s: %s names an unknown symbol \"%s\"", L->file, what, name);
    char *end;
    errno = 0;
    long long x = strtoll(j->valuestring, &end, 10);
    if (!*j->valuestring || *end || errno)
        return fail("%s: %s names an unknown symbol \"%s\"", L->file, what, j->valuestring);
    *v = x;
    return 0;
}

static int read_index(loader *L, const cJSON *j, int lo, int hi, const char *what) {
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < lo ||
        j->valuedouble >= hi)
        return fail("%s: %s is not a value id in [%d, %d)", L->file, what, lo, hi) - 1;
    return (int)j->valuedouble;
}

static const cJSON *array(loader *L, const cJSON *o, const char *key, const char *where) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a)) oari_error(OAR_ERR_IO, "%s: %s has no \"%s\" list", L->file, where, key);
    return cJSON_IsArray(a) ? a : NULL;
}

static const char *string(const cJSON *o, const char *key) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static int read_values(loader *L, const cJSON *vals, const oar_tensor_dict *w, const char *wfile) {
    oar_graph *g = L->g;
    int i = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, vals) {
        char what[256];
        snprintf(what, sizeof what, "%.200svalue %d", L->where, i);
        const char *kind = string(o, "kind"), *dt = string(o, "dtype"), *name = string(o, "name");
        int k = -1;
        for (int c = 0; kind && c < 3; c++)
            if (!strcmp(kind, kind_names[c])) k = c;
        if (k < 0) return fail("%s: %s has no valid kind (node, input, const)", L->file, what);
        oar_dtype dtype = dt ? oari_dtype_from_name(dt) : OAR_DTYPE_INVALID;
        if (dtype == OAR_DTYPE_INVALID)
            return fail("%s: %s has an unknown dtype \"%s\"", L->file, what, dt ? dt : "");
        const cJSON *sh = array(L, o, "shape", what);
        if (!sh) return -1;
        int ndim = cJSON_GetArraySize(sh);
        if (ndim > OAR_MAX_DIMS) return fail("%s: %s has rank %d", L->file, what, ndim);
        int64_t shape[OAR_MAX_DIMS];
        int8_t sym[OAR_MAX_DIMS];
        int32_t mul[OAR_MAX_DIMS];
        for (int d = 0; d < ndim; d++)
            if (read_int(L, cJSON_GetArrayItem(sh, d), &shape[d], &sym[d], &mul[d], what)) return -1;
        int v = oari_graph_add_value(g, (oari_vkind)k, dtype, ndim, shape);
        if (v < 0) return -1;
        oari_gvalue *gv = &g->values[v];
        memset(gv->sym, -1, sizeof gv->sym);
        memcpy(gv->sym, sym, (size_t)ndim);
        memcpy(gv->smul, mul, (size_t)ndim * sizeof *mul);
        if (k != OARI_V_NODE && !name) return fail("%s: %s has no name", L->file, what);
        if (name && !(gv->name = oari_strdup(name))) return -1;
        if (k == OARI_V_CONST && L->depth)
            return fail("%s: %s is a constant; sub-graphs take constants as inputs", L->file, what);
        if (k == OARI_V_CONST) {
            oar_tensor *t = oar_tensor_dict_get(w, name);
            char s1[200], s2[200];
            if (!t)
                return fail("%s: weight \"%s\" is missing (model.json names it)", wfile, name);
            if (t->dtype != dtype || t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof *shape))
                return fail("%s: weight \"%s\" is %s %s; model.json wants %s %s", wfile, name,
                            oar_dtype_name(t->dtype), oari_shape_str(s1, t->ndim, t->shape),
                            oar_dtype_name(dtype), oari_shape_str(s2, ndim, shape));
            gv->constant = oar_tensor_retain(t);
            t->wrapped_number = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "wrapped"));
        }
        i++;
    }
    return 0;
}

static int read_body(loader *L, const cJSON *obj);

/* The two sub-graphs of control node n (ir.h), each read as a graph body
 * with the enclosing graph's symbols; checked against n by the verifier. */
static int read_subs(loader *L, const cJSON *subs, oari_gnode *n, const char *what, const char *opname) {
    if (L->depth >= MAX_NESTING)
        return fail("%s: %s: sub-graphs nested deeper than %d", L->file, what, MAX_NESTING);
    static const char *const labels[2][2] = {{"then", "else"}, {"cond", "body"}};
    oar_graph *g = L->g;
    char saved[sizeof L->where];
    memcpy(saved, L->where, sizeof saved);
    for (int k = 0; k < 2; k++) {
        const cJSON *so = cJSON_GetArrayItem(subs, k);
        if (!(n->sub[k] = oari_graph_new_sub(g))) return -1;
        snprintf(L->where, sizeof L->where, "%.200s (%.16s) %s sub-graph: ", what, opname,
                 labels[n->op == OARI_OP_WHILE][k]);
        L->g = n->sub[k];
        L->depth++;
        int st = cJSON_IsObject(so) ? read_body(L, so) : fail("%s: %sis not an object", L->file, L->where);
        L->depth--;
        L->g = g;
        memcpy(L->where, saved, sizeof saved);
        if (st) return -1;
    }
    return 0;
}

static int read_nodes(loader *L, const cJSON *nodes) {
    oar_graph *g = L->g;
    int i = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, nodes) {
        char what[256];
        snprintf(what, sizeof what, "%.200snode %d", L->where, i);
        const char *opname = string(o, "op");
        int op = opname ? oari_graph_op_lookup(opname) : -1;
        bool ctrl = op >= 0 && oari_is_ctrl((oari_op)op);
        if (op < 0 || (!ctrl && !oari_op_defs[op]))
            return fail("%s: %s has unknown op \"%s\" (not in this build of oar)", L->file, what,
                        opname ? opname : "");
        if (ctrl && L->version < FORMAT_VERSION_CTRL)
            return fail("%s: %s is a %s node, which needs format version %d", L->file, what, opname,
                        FORMAT_VERSION_CTRL);
        const cJSON *in = array(L, o, "in", what), *out = array(L, o, "out", what);
        const cJSON *ia = array(L, o, "i", what), *fa = array(L, o, "f", what);
        const cJSON *subs = cJSON_GetObjectItemCaseSensitive(o, "graphs");
        if (!in || !out || !ia || !fa) return -1;
        if (ctrl != (subs != NULL) || (ctrl && (!cJSON_IsArray(subs) || cJSON_GetArraySize(subs) != 2)))
            return fail("%s: %s (%s): %s", L->file, what, opname,
                        ctrl ? "a control node needs \"graphs\": a list of its two sub-graphs"
                             : "only cond and while nodes have sub-graphs");
        int n_in = cJSON_GetArraySize(in), n_out = cJSON_GetArraySize(out);
        if (n_in > OARI_MAX_IN || (ctrl ? n_out < 1 || n_out > OARI_GMAX_OUT : n_out != oari_op_defs[op]->n_out) ||
            cJSON_GetArraySize(ia) > OARI_MAX_IATTR ||
            cJSON_GetArraySize(fa) > OARI_MAX_FATTR)
            return fail("%s: %s (%s) has %d inputs, %d outputs, %d+%d attributes: not what the op takes",
                        L->file, what, opname, n_in, n_out, cJSON_GetArraySize(ia), cJSON_GetArraySize(fa));
        int ins[OARI_MAX_IN];
        for (int k = 0; k < n_in; k++)
            if ((ins[k] = read_index(L, cJSON_GetArrayItem(in, k), -1, g->n_values, what)) < -1) return -1;
        int outs[OARI_GMAX_OUT];
        for (int j = 0; j < n_out; j++) {
            if ((outs[j] = read_index(L, cJSON_GetArrayItem(out, j), 0, g->n_values, what)) < 0) return -1;
            const oari_gvalue *ov = &g->values[outs[j]];
            if (ov->kind != OARI_V_NODE || ov->producer >= 0)
                return fail("%s: %s output %%%d is not a fresh node value", L->file, what, outs[j]);
        }
        if (oari_graph_add_node(g, (oari_op)op, NULL, n_in, ins, 0, NULL) < 0) return -1;
        oari_gnode *n = &g->nodes[g->n_nodes - 1];
        n->n_out = n_out;
        for (int j = 0; j < n_out; j++) {
            n->out[j] = outs[j];
            g->values[outs[j]].producer = g->n_nodes - 1;
            g->values[outs[j]].out_index = j;
        }
        n->attrs.ni = cJSON_GetArraySize(ia);
        for (int k = 0; k < n->attrs.ni; k++)
            if (read_int(L, cJSON_GetArrayItem(ia, k), &n->attrs.i[k], &n->isym[k], &n->imul[k], what)) return -1;
        n->attrs.nf = cJSON_GetArraySize(fa);
        for (int k = 0; k < n->attrs.nf; k++) {
            const cJSON *f = cJSON_GetArrayItem(fa, k);
            if (cJSON_IsNumber(f)) n->attrs.f[k] = f->valuedouble;
            else if (cJSON_IsString(f) && !strcmp(f->valuestring, "nan")) n->attrs.f[k] = NAN;
            else if (cJSON_IsString(f) && !strcmp(f->valuestring, "inf")) n->attrs.f[k] = INFINITY;
            else if (cJSON_IsString(f) && !strcmp(f->valuestring, "-inf")) n->attrs.f[k] = -INFINITY;
            else return fail("%s: %s float attribute %d is not a number", L->file, what, k);
        }
        if (ctrl && read_subs(L, subs, n, what, opname)) return -1;
        i++;
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].kind == OARI_V_NODE && g->values[v].producer < 0)
            return fail("%s: %svalue %d is a node value no node produces", L->file, L->where, v);
    return 0;
}

/* Values, inputs, nodes and outputs of L->g from obj. */
static int read_body(loader *L, const cJSON *obj) {
    oar_graph *g = L->g;
    const char *where = L->depth ? "a sub-graph" : "the model";
    const cJSON *vals = array(L, obj, "values", where), *ins = array(L, obj, "inputs", where);
    const cJSON *nodes = array(L, obj, "nodes", where), *outs = array(L, obj, "outputs", where);
    if (!vals || !ins || !nodes || !outs) return -1;
    if (read_values(L, vals, L->w, L->wfile)) return -1;
    int ni = cJSON_GetArraySize(ins), no = cJSON_GetArraySize(outs);
    if (no < 1) return fail("%s: %sthe graph has no outputs", L->file, L->where);
    g->inputs = oari_calloc((size_t)(ni ? ni : 1), sizeof *g->inputs);
    g->cap_inputs = ni ? ni : 1;
    g->outputs = oari_calloc((size_t)no, sizeof *g->outputs);
    g->output_names = oari_calloc((size_t)no, sizeof *g->output_names);
    if (!g->inputs || !g->outputs || !g->output_names) return -1;
    g->n_outputs = no;
    for (int i = 0; i < ni; i++) {
        int v = read_index(L, cJSON_GetArrayItem(ins, i), 0, g->n_values, "an input");
        if (v < 0) return -1;
        if (g->values[v].kind != OARI_V_INPUT)
            return fail("%s: %sinput %d refers to value %d, which is not an input", L->file, L->where, i, v);
        g->inputs[g->n_inputs++] = v;
    }
    if (read_nodes(L, nodes)) return -1;
    for (int j = 0; j < no; j++) {
        const cJSON *oj = cJSON_GetArrayItem(outs, j);
        const char *name = string(oj, "name");
        int v = read_index(L, cJSON_GetObjectItemCaseSensitive(oj, "value"), 0, g->n_values, "an output");
        if (v < 0) return -1;
        if (!name) return fail("%s: %soutput %d has no name", L->file, L->where, j);
        g->outputs[j] = v;
        if (!(g->output_names[j] = oari_strdup(name))) return -1;
    }
    return 0;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return oari_error(OAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno)), NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 65536;
            char *b = oari_realloc(buf, cap, nc);
            if (!b) break;
            buf = b;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) {
        oari_free(buf, cap);
        return err ? (oari_error(OAR_ERR_IO, "%s: read error", path), NULL) : NULL;
    }
    buf[n] = 0;
    *len = cap;
    return buf;
}

oar_graph *oar_graph_load(const char *dir) {
    oari_json_init();
    if (!dir) return oari_error(OAR_ERR_INVALID, "graph_load: folder is NULL"), NULL;
    size_t plen = strlen(dir) + 32, cap = 0;
    char *jpath = oari_malloc(plen), *wpath = oari_malloc(plen);
    char *text = NULL;
    cJSON *root = NULL;
    oar_tensor_dict *w = NULL;
    loader L = {0};
    int st = -1;
    if (!jpath || !wpath) goto done;
    snprintf(jpath, plen, "%s/model.json", dir);
    snprintf(wpath, plen, "%s/weights.safetensors", dir);
    L.file = jpath;
    if (!(text = read_file(jpath, &cap))) goto done;
    oari_json_take_oom();
    if (!(root = cJSON_Parse(text)) && oari_json_take_oom()) {
        oari_nomem("model.json");
        goto done;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        oari_error(OAR_ERR_IO, "%s: not valid JSON (truncated or corrupt) at byte %ld", jpath,
                   at ? (long)(at - text) : -1L);
        goto done;
    }
    const char *fmt = string(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!fmt || strcmp(fmt, FORMAT_NAME)) {
        oari_error(OAR_ERR_IO, "%s: not an oar graph (format \"%s\", expected \"%s\")", jpath,
                   fmt ? fmt : "", FORMAT_NAME);
        goto done;
    }
    if (!cJSON_IsNumber(ver) || (ver->valuedouble != FORMAT_VERSION && ver->valuedouble != FORMAT_VERSION_CTRL)) {
        oari_error(OAR_ERR_IO, "%s: unsupported format version %g (this build reads versions %d and %d)", jpath,
                   cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, FORMAT_VERSION, FORMAT_VERSION_CTRL);
        goto done;
    }
    L.version = (int)ver->valuedouble;
    if (!(w = oar_safetensors_load(wpath))) goto done;
    if (!(L.g = oari_graph_new())) goto done;
    oar_graph *g = L.g;
    const cJSON *syms = array(&L, root, "symbols", "the model");
    if (!syms) goto done;
    const cJSON *o;
    cJSON_ArrayForEach(o, syms) {
        const char *name = string(o, "name");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "trace_size");
        if (!name || !cJSON_IsNumber(ts) || g->n_syms == OARI_MAX_SYMS) {
            fail("%s: a symbol lacks a name or trace_size (or there are more than %d)", jpath, OARI_MAX_SYMS);
            goto done;
        }
        if (!(g->syms[g->n_syms].name = oari_strdup(name))) goto done;
        g->syms[g->n_syms++].trace_size = (int64_t)ts->valuedouble;
    }
    L.w = w;
    L.wfile = wpath;
    if (read_body(&L, root)) goto done;
    if (oar_graph_verify(g)) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        oari_error(OAR_ERR_IO, "%s: %s", jpath, msg);
        goto done;
    }
    st = 0;
done:
    if (st) {
        if (!oari_error_pending()) oari_nomem("graph_load");
        oar_graph_free(L.g);
        L.g = NULL;
    }
    cJSON_Delete(root);
    oari_free(text, cap);
    oar_tensor_dict_free(w);
    oari_free(jpath, plen);
    oari_free(wpath, plen);
    return L.g;
}

/* Saved models: a folder with model.json (the graph, versioned, written
 * with cJSON) and a weights file (the constants, through src/io). Loading
 * checks everything it reads and names the file and the problem.
 *
 * Committed as a whole: the weights go to a new file of a unique name
 * ("weights.<pid>.<n>.safetensors"), then model.json, written last through
 * the save protocol (src/core/save.h), is the manifest that names it with its
 * size and crc32. A crash before model.json's rename leaves the old
 * model.json naming the old weights, which are removed only after the
 * rename; concurrent saves each commit a whole model, the last rename wins.
 * Weights files that no model.json names and whose writer is dead, and dead
 * writers' temporaries, are removed by the next save.
 *
 * model.json, version 3:
 *   {"format": "oar.graph", "version": 3,
 *    "weights": {"file": "weights.4242.7.safetensors", "bytes": 1096, "crc32": 12345},
 *    "symbols": [{"name": "N", "trace_size": 1031}],
 *    "values": [{"kind": "input"|"const"|"node", "dtype": "float32",
 *                "shape": ["N", 8], "name": "x", "wrapped": false}, ...],
 *    "inputs": [0],
 *    "nodes": [{"op": "matmul", "in": [0, 3], "out": [4],
 *               "i": ["N", 64], "f": [1e-05, "nan"]}, ...],
 *    "outputs": [{"name": "y", "value": 9}]}
 * A "cond" or "while" node also has "graphs": [two objects with "values",
 * "inputs", "nodes" and "outputs" as above (no constants; the top graph's
 * symbols)], its sub-graphs (ir.h). Versions 1 (and 2, with control nodes),
 * written by older oar, had a fixed "weights.safetensors" and no manifest:
 * they are read as they are, and a save over one writes version 3.
 * A shape entry or integer attribute that is a string names a symbol (a
 * dynamic dim); other integers beyond 2^53 are written as decimal strings;
 * non-finite doubles as "nan", "inf", "-inf". Constants are stored in the
 * safetensors file under their value's "name". */
#include "ir.h"

#include "../io/file.h"
#include "../io/json.h"
#include "../io/safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <zlib.h>
#include <stdarg.h>
#include <math.h>
#include <oar/io.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_NAME "oar.graph"
#define FORMAT_VERSION 3      /* committed by its "weights" record */
#define FORMAT_VERSION_CTRL 2 /* the first with control nodes */
#define MAX_NESTING 16        /* sub-graphs inside sub-graphs */
#define WEIGHTS_PREFIX "weights."
#define WEIGHTS_SUFFIX ".safetensors"
#define LEGACY_WEIGHTS "weights.safetensors" /* versions 1 and 2 */
#define MAX_TRACE_SIZE INT32_MAX

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
        if (ok && gv->dist) { /* placements (static auto parallel): mesh, ndim, (kind, dim, reduce)... */
            const oari_gdist *gd = gv->dist;
            cJSON *dj = cJSON_AddArrayToObject(o, "dist");
            ok = dj && push(dj, cJSON_CreateNumber(gd->mesh)) && push(dj, cJSON_CreateNumber(gd->ndim));
            for (int d = 0; ok && d < gd->ndim; d++)
                ok = push(dj, cJSON_CreateNumber(gd->p[d].kind)) && push(dj, cJSON_CreateNumber(gd->p[d].dim)) &&
                     push(dj, cJSON_CreateNumber(gd->p[d].reduce));
            ok = ok && push(dj, cJSON_CreateNumber(gd->annotated));
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
        /* recompute marks: optional keys, absent on most nodes */
        if (ok && n->segment) ok = cJSON_AddNumberToObject(o, "segment", n->segment) != NULL;
        if (ok && n->recompute) ok = cJSON_AddBoolToObject(o, "recompute", true) != NULL;
        /* a custom op by name: its attribute 0, a registry id, holds only in this process */
        if (ok && n->op == OARI_OP_custom)
            ok = cJSON_AddStringToObject(o, "custom", oari_custom_name_of(&n->attrs)) != NULL;
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

/* model.json's tree; wfile, wbytes, wcrc: the weights record. */
static cJSON *graph_json(const oar_graph *g, const char *wfile, uint64_t wbytes, uint32_t wcrc) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    bool ok = cJSON_AddStringToObject(root, "format", FORMAT_NAME) &&
              cJSON_AddNumberToObject(root, "version", FORMAT_VERSION);
    cJSON *w = ok ? cJSON_AddObjectToObject(root, "weights") : NULL;
    ok = w && cJSON_AddStringToObject(w, "file", wfile) && cJSON_AddNumberToObject(w, "bytes", (double)wbytes) &&
         cJSON_AddNumberToObject(w, "crc32", (double)wcrc);
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

/* A weights file name this oar writes: "weights.<pid>.<n>.safetensors". */
static bool weights_name_ok(const char *name) {
    return oari_file_name_pid(name, WEIGHTS_SUFFIX) > 0 && !strncmp(name, WEIGHTS_PREFIX, strlen(WEIGHTS_PREFIX)) &&
           !strchr(name, '/') && strlen(name) < 200;
}

/* The whole of file path in a new buffer (*cap bytes allocated, NUL
 * ended), or NULL with an error. */
static char *read_file(const char *path, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return oari_error(OAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno)), NULL;
    char *buf = NULL;
    size_t n = 0;
    bool oom = false;
    *cap = 0;
    for (;;) {
        if (n + 4096 + 1 > *cap) {
            size_t nc = *cap ? *cap * 2 : 65536;
            char *b = oari_realloc(buf, *cap, nc);
            if ((oom = !b)) break; /* (not a short file: the error says out of memory) */
            buf = b;
            *cap = nc;
        }
        size_t r = fread(buf + n, 1, *cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (oom || err) {
        oari_free(buf, *cap);
        return err && !oom ? (oari_error(OAR_ERR_IO, "%s: read error", path), NULL) : NULL;
    }
    buf[n] = 0;
    return buf;
}

/* The weights file the model.json in dir names (LEGACY_WEIGHTS for
 * versions 1 and 2) into name: 1; 0 if dir has no model.json; -1 if it
 * cannot be read or names none (then nothing may be removed). Keeps the
 * thread's error as it was: a save calls it to know what it replaces. */
static int committed_weights(const char *dir, char *name, size_t size) {
    char path[4200];
    if (strlen(dir) > 4096) return -1;
    snprintf(path, sizeof path, "%s/model.json", dir);
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", oar_last_error());
    int status = oari_last_status();
    size_t cap = 0;
    char *text = read_file(path, &cap);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "weights");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(w, "file");
    int found = -1;
    if (cJSON_IsNumber(ver) && (ver->valuedouble == 1 || ver->valuedouble == 2)) {
        snprintf(name, size, "%s", LEGACY_WEIGHTS);
        found = 1;
    } else if (cJSON_IsString(file) && weights_name_ok(file->valuestring)) {
        snprintf(name, size, "%s", file->valuestring);
        found = 1;
    }
    cJSON_Delete(root);
    oari_free(text, cap);
    oari_json_take_oom();
    if (msg[0]) oari_error(status, "%s", msg);
    else oar_clear_error();
    return found;
}

/* This process's saves: the commit steps (model.json's rename and what is
 * removed after it) run one at a time, and a save counts as in flight from
 * before its weights file exists to the end of its commit. Other processes'
 * files are removed only when their writer is dead. */
static pthread_mutex_t commit_lock = PTHREAD_MUTEX_INITIALIZER;
static int in_flight;

/* Removes, from dir, weights files that model.json does not name and whose
 * writer is dead (a crash between the weights and model.json) or is this
 * process with no other save in flight (concurrent saves: the last rename
 * wins), and dead writers' temporaries. Best effort; under commit_lock. */
static void sweep_weights(const char *dir) {
    char keep[256] = "";
    oari_file_sweep(dir, WEIGHTS_PREFIX);
    oari_file_sweep(dir, "model.json.tmp.");
    if (committed_weights(dir, keep, sizeof keep) < 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[8192];
        long pid = oari_file_name_pid(e->d_name, WEIGHTS_SUFFIX);
        if (!weights_name_ok(e->d_name) || !strcmp(e->d_name, keep) ||
            !(oari_pid_dead(pid) || (pid == (long)getpid() && in_flight == 0)))
            continue;
        int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n > 0 && (size_t)n < sizeof p) unlink(p);
    }
    closedir(d);
}

int oar_graph_save(const oar_graph *g, const char *dir) {
    oari_json_init();
    if (!g || !dir) return oari_error(OAR_ERR_INVALID, "graph_save: graph or folder is NULL");
    if (mkdir(dir, 0777) && errno != EEXIST)
        return oari_error(OAR_ERR_IO, "graph_save: cannot create folder %s: %s", dir, strerror(errno));
    int nc = oar_graph_num_constants(g), k = 0, st = 0;
    char **names = oari_calloc((size_t)(nc ? nc : 1), sizeof *names);
    oar_tensor **ts = oari_calloc((size_t)(nc ? nc : 1), sizeof *ts);
    size_t plen = strlen(dir) + 256;
    char *jpath = oari_malloc(plen), *wpath = oari_malloc(plen);
    if (!names || !ts || !jpath || !wpath) st = oari_fail_status();
    for (int v = 0; v < g->n_values && !st; v++) {
        if (g->values[v].kind != OARI_V_CONST) continue;
        char key[512];
        const_key(g, v, key, sizeof key);
        if (!(names[k] = oari_strdup(key))) st = oari_fail_status();
        ts[k++] = g->values[v].constant;
    }
    if (st) goto out;
    pthread_mutex_lock(&commit_lock);
    in_flight++;
    pthread_mutex_unlock(&commit_lock);
    /* 1. the weights, under a name no other save uses (pid, then a
     * counter from the clock, so a reused pid does not collide either) */
    static atomic_uint_fast64_t seq;
    char wname[128];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t base = ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) % 1000000000000000000u;
    do {
        snprintf(wname, sizeof wname, WEIGHTS_PREFIX "%ld.%llu" WEIGHTS_SUFFIX, (long)getpid(),
                 (unsigned long long)(base + atomic_fetch_add(&seq, 1)));
        snprintf(wpath, plen, "%s/%s", dir, wname);
    } while (access(wpath, F_OK) == 0);
    uint64_t wbytes = 0;
    uint32_t wcrc = 0;
    st = oari_safetensors_save(wpath, k, (const char *const *)names, ts, 0, NULL, NULL, &wbytes, &wcrc);
    char *text = NULL;
    if (!st) {
        cJSON *j = graph_json(g, wname, wbytes, wcrc);
        text = j ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!text) st = oari_nomem("graph_save: model.json");
    }
    /* 2. model.json, naming them: the commit */
    pthread_mutex_lock(&commit_lock);
    char old[256];
    bool replaces = !st && committed_weights(dir, old, sizeof old) == 1;
    if (!st) {
        snprintf(jpath, plen, "%s/model.json", dir);
        st = oari_file_save(jpath, text, strlen(text), "graph_save");
    }
    /* 3. what no model.json names goes: the weights it named before, once
     * it names others (another process's save may have renamed its own
     * since); ours after a failure (from the rename of the weights file
     * on, whichever step failed), unless model.json names them (only the
     * folder's sync failed) or cannot be read */
    char named_now[256];
    int named = committed_weights(dir, named_now, sizeof named_now);
    if (!st && replaces && named == 1 && strcmp(named_now, old) && strcmp(old, wname)) {
        snprintf(jpath, plen, "%s/%s", dir, old);
        unlink(jpath);
    }
    if (st && named >= 0 && (named == 0 || strcmp(named_now, wname))) unlink(wpath);
    in_flight--;
    sweep_weights(dir);
    pthread_mutex_unlock(&commit_lock);
    cJSON_free(text);
out:
    for (int i = 0; names && i < k; i++) oari_strfree(names[i]);
    oari_free(names, (size_t)(nc ? nc : 1) * sizeof *names);
    oari_free(ts, (size_t)(nc ? nc : 1) * sizeof *ts);
    oari_free(jpath, plen);
    oari_free(wpath, plen);
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

/* A value's "dist" array (placements of static auto parallel), if any, into gv->dist. */
static int read_dist(loader *L, const cJSON *o, oari_gvalue *gv, const char *what) {
    const cJSON *dj = cJSON_GetObjectItemCaseSensitive(o, "dist");
    if (!dj) return 0;
    int n = cJSON_IsArray(dj) ? cJSON_GetArraySize(dj) : -1;
    int64_t x[3 + 3 * OAR_MESH_MAX_DIMS];
    bool ok = n >= 3 && n <= 3 + 3 * OAR_MESH_MAX_DIMS;
    for (int k = 0; ok && k < n; k++) {
        const cJSON *e = cJSON_GetArrayItem(dj, k);
        ok = cJSON_IsNumber(e) && e->valuedouble == (double)(int64_t)e->valuedouble;
        if (ok) x[k] = (int64_t)e->valuedouble;
    }
    ok = ok && x[1] >= 1 && x[1] <= OAR_MESH_MAX_DIMS && n == 3 + 3 * x[1] && (x[n - 1] == 0 || x[n - 1] == 1);
    for (int d = 0; ok && d < x[1]; d++)
        ok = x[2 + 3 * d] >= OAR_PLACEMENT_REPLICATE && x[2 + 3 * d] <= OAR_PLACEMENT_PARTIAL &&
             (x[2 + 3 * d] != OAR_PLACEMENT_SHARD || (x[3 + 3 * d] >= 0 && x[3 + 3 * d] < gv->ndim)) &&
             x[4 + 3 * d] >= 0 && x[4 + 3 * d] < 16;
    if (!ok)
        return fail("%s: %s has a malformed \"dist\" (mesh, ndim, then kind, dim, reduce per mesh dim, "
                    "annotated)", L->file, what);
    oari_gdist gd = {.mesh = (int)x[0], .ndim = (int)x[1], .annotated = x[n - 1] == 1};
    for (int d = 0; d < gd.ndim; d++)
        gd.p[d] = (oar_placement){.kind = (oar_placement_kind)x[2 + 3 * d], .dim = (int)x[3 + 3 * d],
                                  .reduce = (oar_reduce_op)x[4 + 3 * d]};
    return oari_gdist_dup(&gd, &gv->dist);
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
        uint64_t span = 16; /* the product of the dims (zeros as 1), as the strides take it */
        for (int d = 0; d < ndim; d++) {
            if (read_int(L, cJSON_GetArrayItem(sh, d), &shape[d], &sym[d], &mul[d], what)) return -1;
            if (shape[d] < 0 || (shape[d] > 1 && span > ((uint64_t)1 << 62) / (uint64_t)shape[d])) {
                char buf[200];
                return fail("%s: %s has shape %s, negative or past int64", L->file, what,
                            oari_shape_str(buf, d + 1, shape));
            }
            if (shape[d] > 1) span *= (uint64_t)shape[d];
        }
        int v = oari_graph_add_value(g, (oari_vkind)k, dtype, ndim, shape);
        if (v < 0) return -1;
        oari_gvalue *gv = &g->values[v];
        memset(gv->sym, -1, sizeof gv->sym);
        memcpy(gv->sym, sym, (size_t)ndim);
        memcpy(gv->smul, mul, (size_t)ndim * sizeof *mul);
        if (read_dist(L, o, gv, what)) return -1;
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

/* A custom node's op, by the name saved with it: its registry id in this
 * process becomes attribute 0. The op's library must be loaded first. */
static int read_custom(loader *L, const cJSON *o, oari_gnode *n, const char *what) {
    const char *name = string(o, "custom");
    if (!name || n->attrs.ni < 1)
        return fail("%s: %s is a custom node without its op's name or attribute 0", L->file, what);
    int id = oari_custom_id(name);
    if (id < 0)
        return fail("%s: %s uses the custom op \"%s\", which is not registered in this process: "
                    "load the library that registers it (oar_custom_load_library) or register it "
                    "(oar_custom_register) before loading the model", L->file, what, name);
    n->attrs.i[0] = id;
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
        const cJSON *seg = cJSON_GetObjectItemCaseSensitive(o, "segment");
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "recompute");
        if ((seg && (!cJSON_IsNumber(seg) || seg->valuedouble < 1 || seg->valuedouble > INT32_MAX ||
                     seg->valuedouble != (double)(int)seg->valuedouble)) ||
            (rec && !cJSON_IsBool(rec)))
            return fail("%s: %s (%s): \"segment\" must be a positive integer and \"recompute\" a boolean",
                        L->file, what, opname);
        n->segment = seg ? (int)seg->valuedouble : 0;
        n->recompute = rec && cJSON_IsTrue(rec);
        if (op == OARI_OP_custom && read_custom(L, o, n, what)) return -1;
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

/* The format and version of model.json's tree: 0, or an error. */
static int check_header(const cJSON *root, const char *jfile, int *version) {
    const char *fmt = string(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!fmt || strcmp(fmt, FORMAT_NAME))
        return oari_error(OAR_ERR_IO, "%s: not an oar graph (format \"%s\", expected \"%s\")", jfile,
                          fmt ? fmt : "", FORMAT_NAME);
    if (!cJSON_IsNumber(ver) || (ver->valuedouble != 1 && ver->valuedouble != FORMAT_VERSION_CTRL &&
                                 ver->valuedouble != FORMAT_VERSION))
        return oari_error(OAR_ERR_IO, "%s: unsupported format version %g (this build reads versions 1 to %d)",
                          jfile, cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, FORMAT_VERSION);
    *version = (int)ver->valuedouble;
    return 0;
}

/* The graph root describes (symbols, values, nodes, outputs; verified), its
 * constants from w; NULL with an error naming jfile or wfile. */
static oar_graph *build(const cJSON *root, int version, const oar_tensor_dict *w, const char *jfile,
                        const char *wfile) {
    loader L = {.file = jfile, .version = version, .w = w, .wfile = wfile};
    int st = -1;
    if (!(L.g = oari_graph_new())) goto done;
    oar_graph *g = L.g;
    const cJSON *syms = array(&L, root, "symbols", "the model");
    if (!syms) goto done;
    const cJSON *o;
    cJSON_ArrayForEach(o, syms) {
        const char *name = string(o, "name");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "trace_size");
        if (!name || !name[0] || !cJSON_IsNumber(ts) || g->n_syms == OARI_MAX_SYMS) {
            fail("%s: symbol %d lacks a name or trace_size (or there are more than %d)", jfile, g->n_syms,
                 OARI_MAX_SYMS);
            goto done;
        }
        /* sizes are multiples of it (and divided by it): a whole number in
         * [2, 2^31), checked before the conversion */
        double d = ts->valuedouble;
        if (!(d >= 2 && d <= MAX_TRACE_SIZE) || d != floor(d)) {
            fail("%s: symbol \"%s\" has trace_size %g; it must be a whole number in [2, %d]", jfile, name, d,
                 MAX_TRACE_SIZE);
            goto done;
        }
        for (int s = 0; s < g->n_syms; s++)
            if (!strcmp(g->syms[s].name, name) || g->syms[s].trace_size == (int64_t)d) {
                fail("%s: symbol \"%s\" repeats the name or trace_size of symbol \"%s\"", jfile, name,
                     g->syms[s].name);
                goto done;
            }
        if (!(g->syms[g->n_syms].name = oari_strdup(name))) goto done;
        g->syms[g->n_syms++].trace_size = (int64_t)d;
    }
    if (read_body(&L, root)) goto done;
    if (oar_graph_verify(g)) {
        char msg[900];
        int vs = oari_fail_status();
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        oari_error(vs == OAR_ERR_NOMEM ? vs : OAR_ERR_IO, "%s: %s", jfile, msg);
        goto done;
    }
    st = 0;
done:
    if (st) {
        if (!oari_error_pending()) oari_nomem("graph_load");
        oar_graph_free(L.g);
        L.g = NULL;
    }
    return L.g;
}

/* Parses text (len bytes) as model.json; NULL with an error. */
static cJSON *parse(const char *text, size_t len, const char *jfile) {
    oari_json_take_oom();
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root && oari_json_take_oom()) return oari_nomem("model.json"), NULL;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        oari_error(OAR_ERR_IO, "%s: not valid JSON (truncated or corrupt) at byte %ld", jfile,
                   at && at >= text && at <= text + len ? (long)(at - text) : -1L);
    }
    return root;
}

oar_graph *oari_graph_from_json(const char *text, size_t len, const oar_tensor_dict *w, const char *jfile,
                                const char *wfile) {
    oari_json_init();
    if (!text || !w || !jfile || !wfile) return oari_error(OAR_ERR_INVALID, "graph_from_json: NULL argument"), NULL;
    cJSON *root = parse(text, len, jfile);
    int version = 0;
    oar_graph *g = root && !check_header(root, jfile, &version) ? build(root, version, w, jfile, wfile) : NULL;
    cJSON_Delete(root);
    return g;
}

/* model.json's "weights" record: the file (a name this oar writes), its
 * size and crc32; 0 or an error. */
static int weights_record(const cJSON *root, const char *jfile, const char **file, uint64_t *bytes,
                          uint32_t *crc) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "weights");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(w, "file");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(w, "bytes"), *c = cJSON_GetObjectItemCaseSensitive(w, "crc32");
    if (!cJSON_IsObject(w))
        return oari_error(OAR_ERR_IO, "%s: no \"weights\" record (the manifest naming the weights file, its size "
                          "and crc32)", jfile);
    if (!cJSON_IsString(f) || !weights_name_ok(f->valuestring))
        return oari_error(OAR_ERR_IO, "%s: \"weights\".\"file\" is not a weights file name of this folder "
                          "(\"weights.<pid>.<n>.safetensors\")", jfile);
    if (!cJSON_IsNumber(b) || !(b->valuedouble >= 0 && b->valuedouble < 9007199254740992.0) ||
        b->valuedouble != floor(b->valuedouble) || !cJSON_IsNumber(c) ||
        !(c->valuedouble >= 0 && c->valuedouble <= 4294967295.0) || c->valuedouble != floor(c->valuedouble))
        return oari_error(OAR_ERR_IO, "%s: \"weights\" needs \"bytes\" and \"crc32\" as whole numbers", jfile);
    *file = f->valuestring;
    *bytes = (uint64_t)b->valuedouble;
    *crc = (uint32_t)c->valuedouble;
    return 0;
}

/* Opens dir's weights file wname and checks it against the record (size,
 * then crc32); *wf: the open file at its start. 0, ENOENT if it does not
 * exist (a concurrent save removed it: read model.json again), or -1 with
 * an error. */
static int open_weights(const char *wpath, const char *jfile, uint64_t bytes, uint32_t crc, FILE **wf) {
    FILE *f = fopen(wpath, "rb");
    if (!f) {
        if (errno == ENOENT) return ENOENT;
        return oari_error(OAR_ERR_IO, "%s: cannot open %s: %s", jfile, wpath, strerror(errno)), -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != bytes) {
        oari_error(OAR_ERR_IO, "%s: %s holds %lld bytes; it records %llu (not the weights it was saved with: a "
                   "damaged folder)", jfile, wpath, (long long)sb.st_size, (unsigned long long)bytes);
        fclose(f);
        return -1;
    }
    uLong c = crc32(0L, Z_NULL, 0);
    unsigned char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) c = crc32(c, buf, (uInt)r);
    if (ferror(f) || (uint32_t)c != crc || fseeko(f, 0, SEEK_SET) != 0) {
        if (ferror(f)) oari_error(OAR_ERR_IO, "%s: read error", wpath);
        else oari_error(OAR_ERR_IO, "%s: crc32 is %08x; %s records %08x (damaged or replaced weights)", wpath,
                        (unsigned)c, jfile, (unsigned)crc);
        fclose(f);
        return -1;
    }
    *wf = f;
    return 0;
}

oar_graph *oar_graph_load(const char *dir) {
    oari_json_init();
    if (!dir) return oari_error(OAR_ERR_INVALID, "graph_load: folder is NULL"), NULL;
    size_t plen = strlen(dir) + 256;
    char *jpath = oari_malloc(plen), *wpath = oari_malloc(plen);
    oar_graph *g = NULL;
    /* a concurrent save may remove the weights an older model.json named
     * between the two reads: then read model.json again */
    for (int attempt = 0; jpath && wpath && attempt < 4; attempt++) {
        size_t cap = 0;
        int version = 0, ost = -1;
        const char *wname = NULL;
        uint64_t bytes = 0;
        uint32_t crc = 0;
        FILE *wf = NULL;
        snprintf(jpath, plen, "%s/model.json", dir);
        char *text = read_file(jpath, &cap);
        cJSON *root = text ? parse(text, strlen(text), jpath) : NULL;
        if (root && !check_header(root, jpath, &version) && version < FORMAT_VERSION) {
            /* saved by an older oar: no manifest, the weights under their fixed name
             * (read as they are; a save writes the committed format) */
            snprintf(wpath, plen, "%s/%s", dir, LEGACY_WEIGHTS);
            if (!(wf = fopen(wpath, "rb")))
                oari_error(OAR_ERR_IO, "%s (format version %d): cannot open %s: %s", jpath, version, wpath,
                           strerror(errno));
        } else if (root && version == FORMAT_VERSION && !weights_record(root, jpath, &wname, &bytes, &crc)) {
            snprintf(wpath, plen, "%s/%s", dir, wname);
            ost = open_weights(wpath, jpath, bytes, crc, &wf);
            if (ost == ENOENT && attempt == 3)
                oari_error(OAR_ERR_IO, "%s: the weights file it names, %s, does not exist (a damaged folder)",
                           jpath, wpath);
        }
        oar_tensor_dict *w = wf ? oari_safetensors_load_file(wf, wpath) : NULL;
        if (w) g = build(root, version, w, jpath, wpath);
        oar_tensor_dict_free(w);
        cJSON_Delete(root);
        oari_free(text, cap);
        if (ost != ENOENT) break;
    }
    if (!g && !oari_error_pending()) oari_nomem("graph_load");
    oari_free(jpath, plen);
    oari_free(wpath, plen);
    return g;
}

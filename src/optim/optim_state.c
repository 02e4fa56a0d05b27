/* Saving and loading an optimizer's state as safetensors: per-parameter
 * state tensors named "state.<parameter index>.<name>" (torch's state_dict
 * names: momentum_buffer, exp_avg, exp_avg_sq, square_avg, grad_avg),
 * per-parameter step counts "state.<i>.step" (i64 scalars), and the kind,
 * step count, lr and parameter count in the header's metadata. */
#include "optim.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <oar/io.h>
#include <oar/ops.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    [KIND_SGD] = "sgd", [KIND_ADAM] = "adam", [KIND_ADAMW] = "adamw", [KIND_RMSPROP] = "rmsprop"};

/* The name of state slot k (0: s1, 1: s2, 2: s3) for a kind, or NULL. */
static const char *slot_name(optim_kind kind, int k) {
    static const char *const names[][3] = {
        [KIND_SGD] = {"momentum_buffer", NULL, NULL},
        [KIND_ADAM] = {"exp_avg", "exp_avg_sq", NULL},
        [KIND_ADAMW] = {"exp_avg", "exp_avg_sq", NULL},
        [KIND_RMSPROP] = {"momentum_buffer", "square_avg", "grad_avg"},
    };
    return names[kind][k];
}

static oar_tensor **slot(oar_optimizer *o, int k) { return k == 0 ? o->s1 : k == 1 ? o->s2 : o->s3; }

int oar_optim_save(const oar_optimizer *co, const char *path) {
    if (!co || !path)
        return oari_error(OAR_ERR_INVALID, "optim_save: optimizer or path is NULL");
    oar_optimizer *o = (oar_optimizer *)co;
    int max = 4 * o->n + 1;
    size_t bytes = (size_t)max * (sizeof(char *) + sizeof(oar_tensor *));
    void *mem = oari_calloc(1, bytes);
    if (!mem) return oari_fail_status();
    char **names = mem;
    oar_tensor **ts = (oar_tensor **)(names + max);
    int n = 0, st = 0;
    oar_pool *pool = oar_pool_push();
    for (int i = 0; i < o->n && !st; i++) {
        for (int k = 0; k < 3 && !st; k++) {
            oar_tensor *t = slot(o, k)[i];
            if (!t) continue;
            char buf[64];
            snprintf(buf, sizeof buf, "state.%d.%s", i, slot_name(o->kind, k));
            if (!(names[n] = oari_strdup(buf))) st = oari_fail_status();
            ts[n++] = t;
        }
        if (o->pstep[i] && !st) {
            char buf[64];
            snprintf(buf, sizeof buf, "state.%d.step", i);
            oar_tensor *step = oar_tensor_from_data(&o->pstep[i], OAR_I64, 0, NULL);
            if (!step || !(names[n] = oari_strdup(buf))) st = oari_fail_status();
            ts[n++] = step;
        }
    }
    if (!st) {
        char steps[32], lr[40], np[16];
        snprintf(steps, sizeof steps, "%" PRId64, o->steps);
        snprintf(lr, sizeof lr, "%.17g", o->lr);
        snprintf(np, sizeof np, "%d", o->n);
        const char *keys[4] = {"oar.optimizer", "oar.steps", "oar.lr", "oar.num_params"};
        const char *vals[4] = {kind_names[o->kind], steps, lr, np};
        st = oar_safetensors_save_meta(path, n, (const char *const *)names, ts, 4, keys, vals);
    }
    oar_pool_pop(pool);
    for (int i = 0; i < n; i++)
        if (names[i]) oari_strfree(names[i]);
    oari_free(mem, bytes);
    return st;
}

static void append(char *buf, size_t size, size_t *len, int *count, const char *fmt, ...)
    OARI_PRINTF(5, 6);
static void append(char *buf, size_t size, size_t *len, int *count, const char *fmt, ...) {
    if (*count) append(buf, size, len, &(int){0}, "; ");
    (*count)++;
    if (*len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (k > 0) *len = *len + (size_t)k < size ? *len + (size_t)k : size - 1;
}

/* Splits "state.<i>.<field>": the index (or -1 if malformed or >= n) and
 * *field pointing into name. */
static int parse_state_name(const char *name, int n, const char **field) {
    if (strncmp(name, "state.", 6)) return -1;
    const char *p = name + 6;
    long i = 0;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        i = i * 10 + (*p - '0');
        if (i >= n) return -1;
    }
    if (*p != '.' || !p[1]) return -1;
    *field = p + 1;
    return (int)i;
}

/* A decimal integer that fills the whole string, or -1. */
static int64_t parse_int(const char *s) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return *end || errno || v < 0 ? -1 : (int64_t)v;
}

int oar_optim_load(oar_optimizer *o, const char *path) {
    if (!o || !path)
        return oari_error(OAR_ERR_INVALID, "optim_load: optimizer or path is NULL");
    oar_tensor_dict *d = oar_safetensors_load(path);
    if (!d) return oari_fail_status();
    char msg[900];
    size_t len = 0;
    int nbad = 0;
    const char *kind = oar_tensor_dict_metadata(d, "oar.optimizer");
    const char *lr_s = oar_tensor_dict_metadata(d, "oar.lr");
    int64_t steps = parse_int(oar_tensor_dict_metadata(d, "oar.steps"));
    int64_t np = parse_int(oar_tensor_dict_metadata(d, "oar.num_params"));
    char *end = NULL;
    double lr = lr_s ? strtod(lr_s, &end) : NAN;
    if (!kind || !lr_s || *end || !(lr >= 0) || steps < 0 || np < 0) {
        append(msg, sizeof msg, &len, &nbad,
               "not an optimizer state file (metadata oar.optimizer, oar.steps, oar.lr or "
               "oar.num_params missing or invalid)");
    } else {
        if (strcmp(kind, kind_names[o->kind]))
            append(msg, sizeof msg, &len, &nbad, "written by %s, loading into %s", kind,
                   kind_names[o->kind]);
        if (np != o->n)
            append(msg, sizeof msg, &len, &nbad, "%lld parameters in the file, %d in the optimizer",
                   (long long)np, o->n);
    }
    /* every tensor must name a known slot of an existing parameter, with
     * the parameter's dtype and shape (steps: an i64 scalar >= 1) */
    int nt = oar_tensor_dict_size(d);
    int meta_bad = nbad;
    for (int j = 0; j < nt && !meta_bad; j++) {
        const char *name = oar_tensor_dict_name(d, j);
        oar_tensor *t = oar_tensor_dict_tensor(d, j);
        const char *field = NULL;
        int i = parse_state_name(name, o->n, &field);
        if (i < 0) {
            append(msg, sizeof msg, &len, &nbad, "unexpected \"%s\"", name);
            continue;
        }
        oar_tensor *p = o->params[i];
        char a[200], b[200];
        if (!strcmp(field, "step")) {
            if (t->dtype != OAR_I64 || t->ndim != 0 || oar_tensor_item(t) < 1)
                append(msg, sizeof msg, &len, &nbad, "\"%s\" is not a positive i64 scalar", name);
            continue;
        }
        int k = 0;
        while (k < 3 && !(slot_name(o->kind, k) && !strcmp(slot_name(o->kind, k), field)))
            k++;
        if (k == 3)
            append(msg, sizeof msg, &len, &nbad, "unexpected \"%s\" for %s", name,
                   kind_names[o->kind]);
        else if (t->dtype != p->dtype || t->ndim != p->ndim ||
                 memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof *p->shape))
            append(msg, sizeof msg, &len, &nbad, "\"%s\" is %s %s in the file, parameter %d is %s %s",
                   name, oar_dtype_name(t->dtype), oari_shape_str(a, t->ndim, t->shape), i,
                   oar_dtype_name(p->dtype), oari_shape_str(b, p->ndim, p->shape));
    }
    int st = 0;
    if (nbad) {
        st = oari_error(OAR_ERR_INVALID,
                        "optim_load: %s does not match the optimizer (%d mismatches; nothing "
                        "loaded): %s",
                        path, nbad, msg);
        oar_tensor_dict_free(d);
        return st;
    }
    /* build the new state first, so a failed copy leaves o as it was */
    size_t sz = (size_t)o->cap * sizeof(oar_tensor *);
    oar_tensor **fresh[3] = {oari_calloc(1, sz), oari_calloc(1, sz), oari_calloc(1, sz)};
    int64_t *psteps = oari_calloc((size_t)o->cap, sizeof *psteps);
    st = fresh[0] && fresh[1] && fresh[2] && psteps ? 0 : oari_fail_status();
    for (int j = 0; j < nt && !st; j++) {
        const char *name = oar_tensor_dict_name(d, j);
        oar_tensor *t = oar_tensor_dict_tensor(d, j);
        const char *field = NULL;
        int i = parse_state_name(name, o->n, &field);
        if (!strcmp(field, "step")) {
            psteps[i] = (int64_t)oar_tensor_item(t);
            continue;
        }
        for (int k = 0; k < 3; k++)
            if (slot_name(o->kind, k) && !strcmp(slot_name(o->kind, k), field)) {
                oar_pool *pool = oar_pool_push();
                fresh[k][i] = oar_tensor_retain(oar_clone(t));
                oar_pool_pop(pool);
                if (!fresh[k][i]) st = oari_fail_status();
            }
    }
    /* Adam's two moments are made together (optim.c), so a file must hold
     * both or neither for a parameter (found by fuzz/fuzz_optim.c: a lone
     * exp_avg_sq was overwritten, and leaked, by the next step) */
    for (int i = 0; i < o->n && !st && (o->kind == KIND_ADAM || o->kind == KIND_ADAMW); i++)
        if (!fresh[0][i] != !fresh[1][i])
            st = oari_error(OAR_ERR_IO, "optim_load: %s: parameter %d has %s but not %s (nothing loaded)", path, i,
                            fresh[0][i] ? "exp_avg" : "exp_avg_sq", fresh[0][i] ? "exp_avg_sq" : "exp_avg");
    for (int k = 0; k < 3; k++) {
        oar_tensor **old = st ? fresh[k] : slot(o, k);
        for (int i = 0; old && i < o->n; i++)
            oar_tensor_release(old[i]);
        if (st) {
            oari_free(fresh[k], sz);
        } else {
            oari_free(old, sz);
            if (k == 0) o->s1 = fresh[0];
            if (k == 1) o->s2 = fresh[1];
            if (k == 2) o->s3 = fresh[2];
        }
    }
    if (st) {
        oari_free(psteps, (size_t)o->cap * sizeof *psteps);
    } else {
        oari_free(o->pstep, (size_t)o->cap * sizeof *o->pstep);
        o->pstep = psteps;
        o->steps = steps;
        o->lr = lr;
    }
    oar_tensor_dict_free(d);
    return st;
}

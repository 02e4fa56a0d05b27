/* safetensors checkpoints: writing (through the save protocol of file.h)
 * and reading with full validation of the header against the file. A
 * module's state dict on top of both is nn's (src/nn/module_io.c). */
#include "../core/core.h"

#include "file.h"
#include "json.h"
#include "safetensors.h"
#include <errno.h>
#include <math.h>
#include <oar/autograd.h>
#include <oar/io.h>
#include <oar/ops.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest JSON header accepted, as the Python reader (100 MB). */
#define MAX_HEADER (100u << 20)

/* The dtype names of the safetensors format (the Rust crate's Dtype enum:
 * BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 F8_*). Complex
 * dtypes have none: they are written as their float parts (below). */
static const char *const dtype_names[OAR_DTYPE_COUNT] = {
    [OAR_BOOL] = "BOOL", [OAR_U8] = "U8",     [OAR_I32] = "I32", [OAR_I64] = "I64",
    [OAR_F16] = "F16",   [OAR_BF16] = "BF16", [OAR_F32] = "F32", [OAR_F64] = "F64",
    [OAR_I8] = "I8",
};

/* A complex tensor is written as its float parts, a trailing dim of 2
 * (real, imaginary: the complex layout in memory), with the metadata entry
 * "oar.dtype.<name>": "complex64" / "complex128" (include/oar/io.h). */
#define DTYPE_PREFIX OAR_SAFETENSORS_DTYPE_PREFIX
static oar_dtype complex_part(oar_dtype dt) {
    return dt == OAR_C64 ? OAR_F32 : dt == OAR_C128 ? OAR_F64 : OAR_DTYPE_INVALID;
}

static int dtype_from_name(const char *s) {
    for (int d = 0; d < OAR_DTYPE_COUNT; d++)
        if (dtype_names[d] && !strcmp(s, dtype_names[d])) return d;
    /* C64/C128 entries: files of older oar versions (which Python's
     * safetensors cannot read), and recent Python safetensors' complex64 */
    if (!strcmp(s, "C64")) return OAR_C64;
    if (!strcmp(s, "C128")) return OAR_C128;
    return -1;
}

struct oar_tensor_dict {
    int n, cap;
    struct oari_dict_item {
        char *name;
        oar_tensor *t;
    } * items;
    cJSON *metadata; /* the "__metadata__" object, detached; may be NULL */
};

void oar_tensor_dict_free(oar_tensor_dict *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        oari_strfree(d->items[i].name);
        oar_tensor_release(d->items[i].t);
    }
    oari_free(d->items, (size_t)d->cap * sizeof *d->items);
    cJSON_Delete(d->metadata);
    oari_free(d, sizeof *d);
}

int oar_tensor_dict_size(const oar_tensor_dict *d) {
    return d ? d->n : (oari_null_arg(__func__, "dict"), -1);
}

/* Whether i indexes an entry of d; says why not. */
static bool entry_ok(const char *fn, const oar_tensor_dict *d, int i) {
    if (!d) return oari_null_arg(fn, "dict"), false;
    if (i >= 0 && i < d->n) return true;
    oari_error(OAR_ERR_INVALID, "%s: entry %d is out of range [0, %d)", fn, i, d->n);
    return false;
}

const char *oar_tensor_dict_name(const oar_tensor_dict *d, int i) {
    return entry_ok(__func__, d, i) ? d->items[i].name : NULL;
}

oar_tensor *oar_tensor_dict_tensor(const oar_tensor_dict *d, int i) {
    return entry_ok(__func__, d, i) ? d->items[i].t : NULL;
}

oar_tensor *oar_tensor_dict_get(const oar_tensor_dict *d, const char *name) {
    for (int i = 0; d && name && i < d->n; i++)
        if (!strcmp(d->items[i].name, name)) return d->items[i].t;
    return NULL;
}

const char *oar_tensor_dict_metadata(const oar_tensor_dict *d, const char *key) {
    if (!d || !d->metadata || !key) return NULL;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(d->metadata, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- writing ----------------------------------------------------------------- */

static void write_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

/* The JSON header (malloc'd by cJSON) or NULL with an error set. */
static char *build_header(int n, const char *const *names, oar_tensor *const *ts, int n_meta,
                          const char *const *keys, const char *const *values) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return oari_nomem("safetensors header"), NULL;
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    if (!meta || !cJSON_AddStringToObject(meta, "format", "oar")) goto nomem;
    for (int i = 0; i < n_meta; i++)
        if (!cJSON_AddStringToObject(meta, keys[i], values[i])) goto nomem;
    for (int i = 0; i < n; i++) {
        if (complex_part(ts[i]->dtype) == OAR_DTYPE_INVALID) continue;
        size_t kn = strlen(DTYPE_PREFIX) + strlen(names[i]) + 1;
        char *key = oari_malloc(kn);
        if (!key) goto nomem;
        snprintf(key, kn, "%s%s", DTYPE_PREFIX, names[i]);
        cJSON *v = cJSON_AddStringToObject(meta, key, oar_dtype_name(ts[i]->dtype));
        oari_free(key, kn);
        if (!v) goto nomem;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        oar_dtype part = complex_part(ts[i]->dtype);
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        if (!e || !cJSON_AddStringToObject(e, "dtype", dtype_names[part >= 0 ? part : ts[i]->dtype]))
            goto nomem;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        if (!shape) goto nomem;
        for (int k = 0; k < ts[i]->ndim + (part >= 0); k++) {
            cJSON *v = cJSON_CreateNumber(k < ts[i]->ndim ? (double)ts[i]->shape[k] : 2.0);
            if (!v || !cJSON_AddItemToArray(shape, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
        uint64_t nbytes = (uint64_t)ts[i]->numel * oar_dtype_size(ts[i]->dtype);
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (!offs) goto nomem;
        double range[2] = {(double)off, (double)(off + nbytes)};
        for (int k = 0; k < 2; k++) {
            cJSON *v = cJSON_CreateNumber(range[k]);
            if (!v || !cJSON_AddItemToArray(offs, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
        off += nbytes;
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) oari_nomem("safetensors header");
    return s;
nomem:
    cJSON_Delete(root);
    oari_nomem("safetensors header");
    return NULL;
}

int oar_safetensors_save(const char *path, int n, const char *const *names,
                         oar_tensor *const *tensors) {
    return oar_safetensors_save_meta(path, n, names, tensors, 0, NULL, NULL);
}

int oar_safetensors_save_meta(const char *path, int n, const char *const *names,
                              oar_tensor *const *tensors, int n_meta, const char *const *keys,
                              const char *const *values) {
    return oari_safetensors_save(path, n, names, tensors, n_meta, keys, values, NULL, NULL);
}

int oari_safetensors_save(const char *path, int n, const char *const *names, oar_tensor *const *tensors,
                          int n_meta, const char *const *keys, const char *const *values, uint64_t *bytes,
                          uint32_t *crc) {
    oari_json_init();
    if (n_meta < 0 || (n_meta && (!keys || !values)))
        return oari_error(OAR_ERR_INVALID, "safetensors_save: bad metadata (n_meta %d)", n_meta);
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i] || !keys[i][0] || !strcmp(keys[i], "format"))
            return oari_error(OAR_ERR_INVALID,
                              "safetensors_save: metadata entry %d has a NULL, empty or "
                              "reserved (\"format\") key or a NULL value",
                              i);
        if (!strncmp(keys[i], DTYPE_PREFIX, strlen(DTYPE_PREFIX)))
            return oari_error(OAR_ERR_INVALID,
                              "safetensors_save: metadata key \"%.200s\" starts with \"%s\", which "
                              "is reserved for the dtypes safetensors lacks (complex tensors); "
                              "choose another key",
                              keys[i], DTYPE_PREFIX);
        for (int j = 0; j < i; j++)
            if (!strcmp(keys[i], keys[j]))
                return oari_error(OAR_ERR_INVALID, "safetensors_save: duplicate metadata key \"%s\"",
                                  keys[i]);
    }
    if (!path || n < 0 || (n && (!names || !tensors)))
        return oari_error(OAR_ERR_INVALID, "safetensors_save: bad arguments (path %s, n %d)",
                          path ? path : "NULL", n);
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) /* (an op that gave NULL keeps its message and status) */
            return oari_error_pending() ? oari_fail_status()
                                        : oari_error(OAR_ERR_INVALID, "safetensors_save: tensor %d is NULL", i);
        if (!names[i] || !names[i][0] || !strcmp(names[i], "__metadata__"))
            return oari_error(OAR_ERR_INVALID, "safetensors_save: tensor %d has an invalid name",
                              i);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return oari_error(OAR_ERR_INVALID, "safetensors_save: duplicate name \"%s\"",
                                  names[i]);
        oar_dtype dt = tensors[i]->dtype;
        if ((unsigned)dt >= OAR_DTYPE_COUNT || (!dtype_names[dt] && complex_part(dt) < 0))
            return oari_error(OAR_ERR_UNSUPPORTED,
                              "safetensors_save: tensor \"%.200s\" is %s, a dtype the safetensors "
                              "format has no layout for",
                              names[i], oar_dtype_name(dt));
    }
    char *header = build_header(n, names, tensors, n_meta, keys, values);
    if (!header) return oari_fail_status();
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;
    oari_wfile w;
    int st = oari_wfile_open(&w, path, "safetensors_save");
    if (st) {
        cJSON_free(header);
        return st;
    }
    unsigned char len8[8];
    write_le64(len8, padded);
    static const char spaces[8] = "        ";
    st = oari_wfile_write(&w, len8, 8);
    if (!st) st = oari_wfile_write(&w, header, hlen);
    if (!st && padded > hlen) st = oari_wfile_write(&w, spaces, padded - hlen);
    cJSON_free(header);
    /* data, one tensor at a time through a host buffer */
    for (int i = 0; i < n && !st; i++) {
        size_t nbytes = (size_t)tensors[i]->numel * oar_dtype_size(tensors[i]->dtype);
        if (!nbytes) continue;
        void *buf = oari_malloc(nbytes);
        if (!buf) st = oari_fail_status();
        else if (oar_tensor_to_host(tensors[i], buf, nbytes)) st = oari_fail_status();
        else st = oari_wfile_write(&w, buf, nbytes);
        oari_free(buf, nbytes);
    }
    if (st) {
        oari_wfile_abort(&w); /* (a failed write already did) */
        return st;
    }
    if (bytes) *bytes = w.bytes;
    if (crc) *crc = w.crc;
    return oari_wfile_commit(&w);
}

/* ---- reading ------------------------------------------------------------------- */

static int bad(const char *path, const char *fmt, const char *detail) {
    char msg[600];
    snprintf(msg, sizeof msg, fmt, detail);
    return oari_error(OAR_ERR_IO, "safetensors_load: %s: %s", path, msg);
}

/* A non-negative integer JSON number below 2^53, or -1. */
static int64_t json_int(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || d != floor(d)) return -1;
    return (int64_t)d;
}

static int dict_push(oar_tensor_dict *d, const char *name, oar_tensor *t) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 8;
        void *items = oari_realloc(d->items, (size_t)d->cap * sizeof *d->items,
                                   (size_t)cap * sizeof *d->items);
        if (!items) return oari_fail_status();
        d->items = items;
        d->cap = cap;
    }
    char *copy = oari_strdup(name);
    if (!copy) return oari_fail_status();
    d->items[d->n++] = (struct oari_dict_item){copy, t};
    return 0;
}

/* The metadata's dtype markings ("oar.dtype.<name>" entries), sorted by
 * name for lookup (a header may hold many tensors and entries). */
typedef struct markings {
    const cJSON **e;
    size_t n;
} markings;

static const char *marked_name(const cJSON *e) { return e->string + strlen(DTYPE_PREFIX); }

static int cmp_marking(const void *a, const void *b) {
    return strcmp(marked_name(*(const cJSON *const *)a), marked_name(*(const cJSON *const *)b));
}

static bool is_marking(const cJSON *m) {
    return m->string && !strncmp(m->string, DTYPE_PREFIX, strlen(DTYPE_PREFIX));
}

/* Collects meta's markings into mk (its array from oari_malloc). */
static int collect_markings(const char *path, const cJSON *meta, markings *mk) {
    mk->e = NULL;
    mk->n = 0;
    if (!meta) return 0;
    size_t n = 0;
    for (const cJSON *m = meta->child; m; m = m->next) n += is_marking(m);
    if (!n) return 0;
    if (!(mk->e = oari_malloc(n * sizeof *mk->e))) return oari_fail_status();
    for (const cJSON *m = meta->child; m; m = m->next)
        if (is_marking(m)) mk->e[mk->n++] = m;
    qsort(mk->e, n, sizeof *mk->e, cmp_marking);
    for (size_t i = 1; i < n; i++)
        if (!cmp_marking(&mk->e[i - 1], &mk->e[i])) {
            char m[300];
            snprintf(m, sizeof m, "the metadata marks tensor \"%.100s\" twice", marked_name(mk->e[i]));
            return bad(path, "%s", m);
        }
    return 0;
}

/* The complex dtype the metadata gives tensor `name` (OAR_DTYPE_INVALID:
 * none), checked against the dtype and shape of its entry: a float dtype of
 * the matching width with a trailing dim of 2. -2 with an error. */
static int complex_marking(const char *path, const markings *mk, const char *name, int file_dtype,
                           int ndim, const int64_t *dims) {
    const cJSON *v = NULL;
    size_t lo = 0, hi = mk->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(marked_name(mk->e[mid]), name);
        if (!c) {
            v = mk->e[mid];
            break;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (!v) return OAR_DTYPE_INVALID;
    char m[400];
    const char *want = cJSON_IsString(v) ? v->valuestring : "";
    int dt = !strcmp(want, "complex64") ? OAR_C64 : !strcmp(want, "complex128") ? OAR_C128 : -1;
    if (dt < 0) {
        snprintf(m, sizeof m, "the metadata gives tensor \"%.100s\" the dtype \"%.40s\" (%s%.100s); "
                 "known: complex64, complex128", name, want, DTYPE_PREFIX, name);
        return bad(path, "%s", m), -2;
    }
    oar_dtype part = complex_part((oar_dtype)dt);
    if (file_dtype != (int)part || ndim < 1 || dims[ndim - 1] != 2) {
        char sh[200];
        snprintf(m, sizeof m, "the metadata marks tensor \"%.100s\" %s, stored as %s with a trailing "
                 "dim of 2 (real, imaginary), but the file holds it as %s %s", name, want,
                 dtype_names[part], file_dtype >= 0 && dtype_names[file_dtype] ? dtype_names[file_dtype]
                                                                        : oar_dtype_name((oar_dtype)file_dtype),
                 oari_shape_str(sh, ndim, dims));
        return bad(path, "%s", m), -2;
    }
    return dt;
}

/* Parses and checks one header entry; reads its data from f. mk: the
 * metadata's markings of complex tensors. */
static int load_entry(const char *path, FILE *f, uint64_t data_start, uint64_t data_size,
                      const cJSON *e, const markings *mk, oar_tensor_dict *d) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return bad(path, "entry \"%s\" is not an object", name);
    if (oar_tensor_dict_get(d, name)) return bad(path, "duplicate tensor name \"%s\"", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return bad(path, "entry \"%s\" lacks dtype, shape or data_offsets", name);
    int dtype = dtype_from_name(dt->valuestring);
    if (dtype < 0) {
        char m[300];
        snprintf(m, sizeof m, "tensor \"%.100s\" has unsupported dtype \"%.20s\"", name,
                 dt->valuestring);
        return bad(path, "%s", m);
    }
    int ndim = cJSON_GetArraySize(shape);
    /* (a complex tensor of rank 8 is stored with 9 dims) */
    if (ndim > OAR_MAX_DIMS + 1 || (ndim == OAR_MAX_DIMS + 1 && dtype != OAR_F32 && dtype != OAR_F64))
        return bad(path, "tensor \"%s\" has more than 8 dims", name);
    int64_t dims[OAR_MAX_DIMS + 1];
    int64_t numel = 1;
    for (int k = 0; k < ndim; k++) {
        dims[k] = json_int(cJSON_GetArrayItem(shape, k));
        if (dims[k] < 0) return bad(path, "tensor \"%s\" has an invalid shape", name);
        if (dims[k] && numel > INT64_MAX / 16 / dims[k])
            return bad(path, "tensor \"%s\" is too large", name);
        numel *= dims[k];
    }
    int cplx = complex_marking(path, mk, name, dtype, ndim, dims);
    if (cplx == -2) return OAR_ERR_IO;
    if (cplx >= 0) { /* the float parts become one complex element */
        dtype = cplx;
        ndim--;
        numel /= 2;
    } else if (ndim > OAR_MAX_DIMS) {
        return bad(path, "tensor \"%s\" has more than 8 dims", name);
    }
    if (cJSON_GetArraySize(offs) != 2)
        return bad(path, "tensor \"%s\" has invalid data_offsets", name);
    int64_t b = json_int(cJSON_GetArrayItem(offs, 0)), en = json_int(cJSON_GetArrayItem(offs, 1));
    uint64_t nbytes = (uint64_t)numel * oar_dtype_size((oar_dtype)dtype);
    if (b < 0 || en < b) return bad(path, "tensor \"%s\" has invalid data_offsets", name);
    if ((uint64_t)(en - b) != nbytes) {
        char m[300];
        snprintf(m, sizeof m,
                 "tensor \"%.100s\" spans %lld bytes but its shape and dtype need %llu", name,
                 (long long)(en - b), (unsigned long long)nbytes);
        return bad(path, "%s", m);
    }
    char what[160];
    snprintf(what, sizeof what, "tensor \"%.100s\"", name);
    uint64_t span;
    int lst = oari_load_shape("safetensors_load", path, what, ndim, dims, oar_dtype_size((oar_dtype)dtype), UINT64_MAX,
                              &span);
    if (lst) return lst;
    if ((uint64_t)en > data_size) {
        char m[300];
        snprintf(m, sizeof m,
                 "tensor \"%.100s\" ends at byte %lld of a %llu-byte data section "
                 "(file truncated?)",
                 name, (long long)en, (unsigned long long)data_size);
        return bad(path, "%s", m);
    }
    oar_tensor *t = oari_tensor_empty(NULL, (oar_dtype)dtype, ndim, dims);
    if (!t) return oari_fail_status();
    if (nbytes && (fseeko(f, (off_t)(data_start + (uint64_t)b), SEEK_SET) != 0 ||
                   fread(t->storage->data, 1, nbytes, f) != nbytes)) {
        oar_tensor_release(t);
        return bad(path, "reading tensor \"%s\" failed (file truncated?)", name);
    }
    if (dtype == OAR_BOOL) /* only 0 and 1 are valid bools */
        for (uint64_t i = 0; i < nbytes; i++) {
            unsigned char *p = (unsigned char *)t->storage->data + i;
            if (*p > 1) {
                oar_tensor_release(t);
                return bad(path, "tensor \"%s\" holds a bool that is neither 0 nor 1", name);
            }
        }
    int st = dict_push(d, name, t);
    if (st) oar_tensor_release(t);
    return st;
}

oar_tensor_dict *oari_safetensors_load_file(FILE *f, const char *path) {
    oar_tensor_dict *d = NULL;
    markings mk = {0};
    char *header = NULL;
    cJSON *root = NULL;
    uint64_t hlen = 0;
    int st = 0;
    if (fseeko(f, 0, SEEK_END) != 0) {
        st = bad(path, "%s", "cannot seek");
        goto out;
    }
    off_t fsize = ftello(f);
    rewind(f);
    unsigned char len8[8];
    if (fsize < 8 || fread(len8, 1, 8, f) != 8) {
        st = bad(path, "%s", "file is shorter than the 8-byte header length (truncated?)");
        goto out;
    }
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    if (hlen < 2 || hlen > MAX_HEADER || hlen > (uint64_t)fsize - 8) {
        char m[200];
        snprintf(m, sizeof m,
                 "header length %llu does not fit the %lld-byte file (truncated or "
                 "not a safetensors file)",
                 (unsigned long long)hlen, (long long)fsize);
        st = bad(path, "%s", m);
        goto out;
    }
    header = oari_malloc((size_t)hlen + 1);
    if (!header) {
        st = oari_fail_status();
        goto out;
    }
    if (fread(header, 1, (size_t)hlen, f) != hlen) {
        st = bad(path, "%s", "reading the header failed");
        goto out;
    }
    header[hlen] = 0;
    if (strlen(header) != hlen) {
        st = bad(path, "%s", "header contains a NUL byte");
        goto out;
    }
    oari_json_take_oom();
    root = cJSON_ParseWithLength(header, (size_t)hlen);
    if (!root && oari_json_take_oom()) {
        st = oari_nomem("safetensors header");
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        st = bad(path, "%s", "header is not a JSON object (corrupt file)");
        goto out;
    }
    d = oari_calloc(1, sizeof *d);
    if (!d) {
        st = oari_fail_status();
        goto out;
    }
    uint64_t data_start = 8 + hlen, data_size = (uint64_t)fsize - data_start;
    /* (read first: it says which tensors are complex, wherever it stands) */
    const cJSON *first_meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    if ((st = collect_markings(path, cJSON_IsObject(first_meta) ? first_meta : NULL, &mk))) goto out;
    cJSON *meta = NULL;
    for (cJSON *e = root->child; e && !st; e = e->next) {
        if (!e->string) {
            st = bad(path, "%s", "header entry without a name");
        } else if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e) || meta)
                st = bad(path, "%s", "invalid or repeated __metadata__");
            meta = e;
        } else {
            st = load_entry(path, f, data_start, data_size, e, &mk, d);
        }
    }
    if (!st && meta) d->metadata = cJSON_DetachItemViaPointer(root, meta);
out:
    oari_free(mk.e, mk.n * sizeof *mk.e);
    cJSON_Delete(root);
    if (header) oari_free(header, (size_t)hlen + 1);
    fclose(f);
    if (st) {
        oar_tensor_dict_free(d);
        return NULL;
    }
    return d;
}

oar_tensor_dict *oar_safetensors_load(const char *path) {
    oari_json_init();
    if (!path) return oari_error(OAR_ERR_INVALID, "safetensors_load: path is NULL"), NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return oari_error(OAR_ERR_IO, "safetensors_load: cannot open %s: %s", path,
                          strerror(errno)),
               NULL;
    return oari_safetensors_load_file(f, path);
}

oar_tensor_dict *oar_safetensors_load_memory(const void *data, size_t size, const char *name) {
    oari_json_init();
    if (!data || !size)
        return oari_error(OAR_ERR_IO, "safetensors_load: %s: buffer is %s",
                          name ? name : "(memory)", data ? "empty" : "NULL"),
               NULL;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return oari_error(OAR_ERR_NOMEM, "safetensors_load: cannot open a %zu-byte buffer: %s",
                          size, strerror(errno)),
               NULL;
    return oari_safetensors_load_file(f, name ? name : "(memory)");
}

/* ONNX import (include/oar/onnx.h): parse the ModelProto with protobuf-c
 * (bindings generated at build time from Debian's onnx.proto) and trace the
 * node list, each node through its registry row (onnx_registry.c). Also the
 * helpers the converters share: attributes, constant inputs, TensorProtos. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include "../graph/ir.h"
#include "../io/file.h"
#include <math.h>
#include <oar/onnx.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* protobuf-c allocates through the one hook; free gets no size, so keep it
 * in a header. */
typedef union { size_t n; max_align_t align; } pb_hdr;
static void *pb_alloc(void *data, size_t n) {
    (void)data;
    pb_hdr *h = oari_malloc(n + sizeof *h);
    if (!h) return NULL;
    h->n = n;
    return h + 1;
}
static void pb_free(void *data, void *p) {
    (void)data;
    if (!p) return;
    pb_hdr *h = (pb_hdr *)p - 1;
    oari_free(h, h->n + sizeof *h);
}
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

/* ---- attributes --------------------------------------------------------------- */

const Onnx__AttributeProto *oari_onnx_attr(const oari_onnx_node *nd, const char *name) {
    const Onnx__NodeProto *n = nd->n;
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}
int64_t oari_onnx_attr_i(const oari_onnx_node *nd, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, name);
    return a && a->has_i ? a->i : def;
}
double oari_onnx_attr_f(const oari_onnx_node *nd, const char *name, double def) {
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, name);
    return a && a->has_f ? a->f : def;
}
bool oari_onnx_attr_s_is(const oari_onnx_node *nd, const char *name, const char *def, const char *s) {
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, name);
    if (!a || !a->has_s) return def && !strcmp(def, s);
    return a->s.len == strlen(s) && !memcmp(a->s.data, s, a->s.len);
}
int oari_onnx_attr_ints(const oari_onnx_node *nd, const char *name, int64_t *out, int max) {
    const Onnx__AttributeProto *a = oari_onnx_attr(nd, name);
    if (!a) return -1;
    if (a->n_ints > (size_t)max)
        return oari_error(OAR_ERR_UNSUPPORTED, "attribute %s has %zu entries (at most %d)", name, a->n_ints, max);
    if (a->n_ints) memcpy(out, a->ints, a->n_ints * sizeof *out); /* (an empty list: ints is NULL) */
    return (int)a->n_ints;
}

/* ---- values ------------------------------------------------------------------- */

int oari_onnx_need(const oari_onnx_node *nd, int n) {
    for (int i = 0; i < n; i++)
        if (i >= nd->n_in || !nd->in[i]) return oari_error(OAR_ERR_INVALID, "input %d is missing (needs %d)", i, n);
    return 0;
}

/* Input i must be present (the others may be omitted). */
static int need_one(const oari_onnx_node *nd, int i) {
    if (i >= nd->n_in || !nd->in[i]) return oari_error(OAR_ERR_INVALID, "input %d is missing", i);
    return 0;
}

int oari_onnx_input_ints(const oari_onnx_node *nd, int i, int64_t *out, int max) {
    int st = need_one(nd, i);
    if (st) return st;
    oar_tensor *t = nd->in[i];
    const char *name = nd->n->input[i];
    if (!oar_tensor_data(t))
        return oari_error(OAR_ERR_UNSUPPORTED, "input %d '%s' is computed at run time, but its value is needed at "
                          "import (oar graphs have static shapes): make it an initializer or bind it "
                          "(oar_onnx_options.values)", i, name);
    if (oar_tensor_ndim(t) > 1 || oar_dtype_is_complex(oar_tensor_dtype(t)))
        return oari_error(OAR_ERR_INVALID, "input %d '%s' must be a 0-d or 1-D tensor (rank %d)", i, name,
                          oar_tensor_ndim(t));
    int64_t k = oar_tensor_numel(t);
    if (k > max) return oari_error(OAR_ERR_UNSUPPORTED, "input %d '%s' has %lld values (at most %d)", i, name,
                                   (long long)k, max);
    oar_tensor *c = oar_contiguous(t);
    if (!c) return OAR_ERR_INVALID;
    for (int64_t j = 0; j < k; j++) {
        const char *p = (const char *)oar_tensor_data(c) + j * (int64_t)oar_dtype_size(c->dtype);
        if (c->dtype == OAR_I64) { /* exact: ends of INT64_MAX are common */
            memcpy(&out[j], p, sizeof out[j]);
            continue;
        }
        double v = oari_load_f64(p, c->dtype);
        if (!(v >= -9.2e18 && v <= 9.2e18))
            return oari_error(OAR_ERR_INVALID, "input %d '%s' holds %g, not an integer in range", i, name, v);
        out[j] = (int64_t)v;
    }
    return (int)k; /* c belongs to the trace's pool */
}

int oari_onnx_input_double(const oari_onnx_node *nd, int i, double *out) {
    int st = need_one(nd, i);
    if (st) return st;
    oar_tensor *t = nd->in[i];
    if (!oar_tensor_data(t))
        return oari_error(OAR_ERR_UNSUPPORTED, "input %d '%s' is computed at run time, but its value is needed at "
                          "import: make it an initializer or bind it (oar_onnx_options.values)", i, nd->n->input[i]);
    if (oar_tensor_numel(t) != 1 || oar_dtype_is_complex(oar_tensor_dtype(t)))
        return oari_error(OAR_ERR_INVALID, "input %d '%s' must hold one real value", i, nd->n->input[i]);
    *out = oar_tensor_item(t);
    return 0;
}

oar_dtype oari_onnx_dtype(int32_t e) {
    switch (e) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return OAR_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return OAR_F64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return OAR_F16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return OAR_BF16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return OAR_I32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return OAR_I64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: return OAR_U8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return OAR_I8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return OAR_BOOL;
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64: return OAR_C64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128: return OAR_C128;
    default: return OAR_DTYPE_INVALID;
    }
}

static const char *elem_name(int32_t e) {
    static const char *const names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                        "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                        "complex128", "bfloat16"};
    return e >= 0 && e < (int32_t)(sizeof names / sizeof *names) ? names[e] : "unknown";
}

/* The folder of the model file being imported on this thread (external
 * data paths are relative to it); NULL while importing from memory. */
static _Thread_local const char *model_dir;

/* An external_data value, or NULL. */
static const char *external_value(const Onnx__TensorProto *tp, const char *key) {
    for (size_t i = 0; i < tp->n_external_data; i++)
        if (tp->external_data[i]->key && !strcmp(tp->external_data[i]->key, key)) return tp->external_data[i]->value;
    return NULL;
}

/* A non-negative byte count from an external_data value ("offset",
 * "length"), or -1. */
static long long external_count(const char *v) {
    if (!v || !*v) return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end || x < 0 ? -1 : x;
}

/* Opens the file tp's external_data names (ONNX's rules: "location"
 * relative to the model's folder, never absolute nor through "..",
 * optional "offset" and "length") and checks that it holds the tensor's
 * nbytes; *fp is then positioned at them. Before anything is allocated. */
static int open_external(const Onnx__TensorProto *tp, const char *what, const char *name, uint64_t nbytes,
                         FILE **fp) {
    const char *loc = external_value(tp, "location"), *off_s = external_value(tp, "offset");
    const char *len_s = external_value(tp, "length");
    if (!model_dir)
        return oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': its data is in an external file; load the model "
                          "from its file (oar_onnx_load), not from memory", what, name);
    if (!loc || !*loc)
        return oari_error(OAR_ERR_INVALID, "onnx: %s '%s': external data without a location", what, name);
    if (loc[0] == '/' || !strcmp(loc, "..") || !strncmp(loc, "../", 3) || strstr(loc, "/../") ||
        (strlen(loc) >= 3 && !strcmp(loc + strlen(loc) - 3, "/..")))
        return oari_error(OAR_ERR_INVALID, "onnx: %s '%s': external data location '%s' must be a path inside the "
                          "model's folder", what, name, loc);
    long long off = off_s ? external_count(off_s) : 0, len = len_s ? external_count(len_s) : (long long)nbytes;
    if (off < 0 || len < 0)
        return oari_error(OAR_ERR_INVALID, "onnx: %s '%s': bad external data offset '%s' or length '%s'", what,
                          name, off_s ? off_s : "", len_s ? len_s : "");
    if ((uint64_t)len != nbytes)
        return oari_error(OAR_ERR_INVALID, "onnx: %s '%s': external data length %lld, but the tensor holds %llu "
                          "bytes", what, name, len, (unsigned long long)nbytes);
    size_t plen = strlen(model_dir) + strlen(loc) + 2;
    char *path = oari_malloc(plen);
    if (!path) return oari_fail_status();
    snprintf(path, plen, "%s/%s", model_dir, loc);
    FILE *f = fopen(path, "rb");
    int st = 0;
    long long size = -1;
    if (!f)
        st = oari_error(OAR_ERR_IO, "onnx: %s '%s': cannot open its external data file '%s'", what, name, path);
    else if (fseeko(f, 0, SEEK_END) != 0 || (size = ftello(f)) < 0)
        st = oari_error(OAR_ERR_IO, "onnx: %s '%s': cannot size '%s'", what, name, path);
    else if (off > size || nbytes > (uint64_t)(size - off))
        st = oari_error(OAR_ERR_INVALID, "onnx: %s '%s': '%s' holds %lld bytes, the tensor needs %llu at offset "
                        "%lld (truncated?)", what, name, path, size, (unsigned long long)nbytes, off);
    else if (fseeko(f, (off_t)off, SEEK_SET) != 0)
        st = oari_error(OAR_ERR_IO, "onnx: %s '%s': cannot seek in '%s'", what, name, path);
    if (f && st) fclose(f);
    if (!st) *fp = f;
    oari_free(path, plen);
    return st;
}

/* The number of entries of tp's typed field that holds dtype dt's data
 * (complex: two per element). */
static size_t typed_count(const Onnx__TensorProto *tp, oar_dtype dt) {
    switch (dt) {
    case OAR_F32: case OAR_C64: return tp->n_float_data;
    case OAR_F64: case OAR_C128: return tp->n_double_data;
    case OAR_I64: return tp->n_int64_data;
    default: return tp->n_int32_data; /* i32; bool, (u)int8, float16, bfloat16: one int32_data entry each */
    }
}

oar_tensor *oari_onnx_tensor_of(const Onnx__TensorProto *tp, const char *what) {
    const char *name = tp->name ? tp->name : "";
    if (tp->n_dims > OAR_MAX_DIMS) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': %zu dims (max %d)", what, name, tp->n_dims, OAR_MAX_DIMS);
        return NULL;
    }
    if (tp->segment) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': segmented tensors are not supported", what, name);
        return NULL;
    }
    int64_t shape[OAR_MAX_DIMS], count = 1;
    for (size_t d = 0; d < tp->n_dims; d++) {
        if (tp->dims[d] < 0 || (tp->dims[d] > 0 && count > INT64_MAX / 16 / tp->dims[d])) {
            oari_error(OAR_ERR_INVALID, "onnx: %s '%s': bad dim %lld", what, name, (long long)tp->dims[d]);
            return NULL;
        }
        shape[d] = tp->dims[d];
        count *= shape[d];
    }
    oar_dtype dt = oari_onnx_dtype(tp->data_type);
    if (dt == OAR_DTYPE_INVALID) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': element type %s (%d) is not an oar dtype", what, name,
                   elem_name(tp->data_type), (int)tp->data_type);
        return NULL;
    }
    size_t esz = oar_dtype_size(dt);
    size_t n = (size_t)count;
    uint64_t nbytes;
    /* the data the dims declare must be there before the tensor is allocated */
    FILE *ext = NULL;
    char label[300];
    snprintf(label, sizeof label, "%s '%.200s'", what, name);
    if (oari_load_shape("onnx", label, "the tensor", (int)tp->n_dims, shape, esz, UINT64_MAX, &nbytes)) return NULL;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        if (open_external(tp, what, name, nbytes, &ext)) return NULL;
    } else if (tp->has_raw_data ? tp->raw_data.len != nbytes
                                : typed_count(tp, dt) != (oar_dtype_is_complex(dt) ? 2 * n : n)) {
        oari_error(OAR_ERR_INVALID, "onnx: %s '%s': the data does not hold %lld %s elements", what, name,
                   (long long)count, elem_name(tp->data_type));
        return NULL;
    }
    oar_tensor *t = oari_tensor_empty(NULL, dt, (int)tp->n_dims, shape); /* owned until adopted */
    if (!t) {
        if (ext) fclose(ext);
        return NULL;
    }
    void *dst = oar_tensor_data(t);
    if (ext) {
        bool ok = !nbytes || fread(dst, 1, nbytes, ext) == nbytes;
        fclose(ext);
        if (!ok) {
            oar_tensor_release(t);
            oari_error(OAR_ERR_IO, "onnx: %s '%s': short read of its external data", what, name);
            return NULL;
        }
        return oari_pool_adopt(t);
    }
    if (tp->has_raw_data) { /* little-endian, as on every host oar runs on */
        if (n) memcpy(dst, tp->raw_data.data, n * esz);
        return oari_pool_adopt(t);
    }
    switch (dt) {
    case OAR_F32: case OAR_C64:
        if (n) memcpy(dst, tp->float_data, n * esz);
        break;
    case OAR_F64: case OAR_C128:
        if (n) memcpy(dst, tp->double_data, n * esz);
        break;
    case OAR_I64:
        if (n) memcpy(dst, tp->int64_data, n * 8);
        break;
    case OAR_I32:
        if (n) memcpy(dst, tp->int32_data, n * 4);
        break;
    default: /* bool, uint8, int8, float16, bfloat16: one int32_data entry each (int8's low byte) */
        for (size_t i = 0; i < n; i++) {
            int32_t v = tp->int32_data[i];
            if (esz == 1) ((uint8_t *)dst)[i] = dt == OAR_BOOL ? v != 0 : (uint8_t)v;
            else ((uint16_t *)dst)[i] = (uint16_t)v;
        }
        break;
    }
    return oari_pool_adopt(t);
}

oar_tensor *oari_onnx_scalar(double v, oar_dtype dt) {
    oar_tensor *t = oar_empty(dt, 0, NULL, NULL);
    if (t) oari_store_f64(oar_tensor_data(t), dt, v);
    return t;
}

int oari_onnx_axis(int64_t axis, int nd, bool inclusive_end, int64_t *out) {
    int64_t lim = nd + (inclusive_end ? 1 : 0);
    int64_t a = axis < 0 ? axis + lim - (inclusive_end ? 1 : 0) : axis;
    if (a < 0 || a >= lim)
        return oari_error(OAR_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, nd);
    *out = a;
    return 0;
}

oar_tensor *oari_onnx_flatten2d(oar_tensor *x, int64_t axis) {
    int nd = oar_tensor_ndim(x);
    if (oari_onnx_axis(axis, nd, true, &axis)) return NULL;
    const int64_t *s = oar_tensor_shape(x);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < nd; d++) *(d < axis ? &outer : &inner) *= s[d];
    return oar_reshape(x, 2, (int64_t[]){outer, inner});
}

/* ---- the graph ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    oar_tensor *t;
    int sym; /* index in ctx.syms of what its sizes stand for (from a Shape of dynamic dims), or -1 */
    const Onnx__NodeProto *producer; /* the node that made it; NULL for inputs and initializers */
} entry;

typedef struct {
    Onnx__GraphProto *g;
    int64_t opset;
    entry *map;
    size_t n, cap;
    size_t n_in;           /* symbolic inputs */
    const char **in_names; /* their names */
    size_t n_bound;
    const char **bound_names; /* inputs given values */
    oar_tensor **bound;
    bool static_shapes;
    bool fold_qdq;          /* DequantizeLinear -> Conv/MatMul/Gemm onto the int8 kernels */
    int n_folded;           /* nodes folded so (their dequantize nodes are left dead) */
    int64_t training_opset; /* of OARI_ONNX_TRAINING_DOMAIN, -1 if not imported */
    oari_onnx_svec *syms;   /* symbolic sizes, referred to by entries */
    size_t n_syms, cap_syms;
    oar_tensor *sym_src[OARI_MAX_SYMS]; /* a graph input whose dim sym_dim[s] is symbol s */
    int sym_dim[OARI_MAX_SYMS];
} ctx;

static entry *lookup(ctx *c, const char *name) {
    for (size_t i = c->n; i-- > 0;)
        if (!strcmp(c->map[i].name, name)) return &c->map[i];
    return NULL;
}

static int bind(ctx *c, const char *name, oar_tensor *t) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        entry *m = oari_realloc(c->map, c->cap * sizeof *m, cap * sizeof *m);
        if (!m) return oari_fail_status();
        c->map = m;
        c->cap = cap;
    }
    c->map[c->n++] = (entry){name, t, -1, NULL};
    return 0;
}

/* Keeps v; its index, or -1 on failure. */
static int keep_sym(ctx *c, const oari_onnx_svec *v) {
    if (c->n_syms == c->cap_syms) {
        size_t cap = c->cap_syms ? 2 * c->cap_syms : 16;
        oari_onnx_svec *m = oari_realloc(c->syms, c->cap_syms * sizeof *m, cap * sizeof *m);
        if (!m) return -1;
        c->syms = m;
        c->cap_syms = cap;
    }
    c->syms[c->n_syms] = *v;
    return (int)c->n_syms++;
}

static const oari_onnx_svec *sym_of(const ctx *c, const entry *e) {
    return e->sym >= 0 && oari_onnx_svec_dynamic(&c->syms[e->sym]) ? &c->syms[e->sym] : NULL;
}

/* Inputs whose values become a shape (or an attribute the tracer rewrites
 * per run): symbolic sizes reach them as placeholder sizes. */
static bool size_sink(const char *op, int i) {
    if (!strcmp(op, "Reshape") || !strcmp(op, "Expand") || !strcmp(op, "Tile") || !strcmp(op, "TopK")) return i == 1;
    if (!strcmp(op, "Resize")) return i == 3; /* sizes */
    if (!strcmp(op, "Slice")) return i >= 1;
    return !strcmp(op, "ConstantOfShape");
}

static bool is_initializer(Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name && !strcmp(g->initializer[i]->name, name)) return true;
    return false;
}

static int run_nodes(ctx *c, Onnx__NodeProto *const *nodes, size_t n_node, const char *where);

/* What input i of nd is, if a DequantizeLinear of the default domain made
 * it (dq->q NULL otherwise). */
static void dequantized(ctx *c, const oari_onnx_node *nd, int i, oari_onnx_dq *dq) {
    memset(dq, 0, sizeof *dq);
    const char *name = nd->n->input[i];
    entry *e = name[0] ? lookup(c, name) : NULL;
    const Onnx__NodeProto *p = e ? e->producer : NULL;
    if (!p || !p->op_type || strcmp(p->op_type, "DequantizeLinear") || (p->domain && p->domain[0] &&
        strcmp(p->domain, "ai.onnx")) || p->n_input < 2)
        return;
    oar_tensor *in[3] = {0};
    for (size_t k = 0; k < p->n_input && k < 3; k++) {
        entry *pe = p->input[k][0] ? lookup(c, p->input[k]) : NULL;
        if (!pe && p->input[k][0]) return;
        in[k] = pe ? pe->t : NULL;
    }
    oari_onnx_node pn = {.n = p};
    *dq = (oari_onnx_dq){.q = in[0], .scale = in[1], .zp = in[2], .axis = oari_onnx_attr_i(&pn, "axis", 1)};
}

/* One node: its outputs bound in the map. Errors name nothing (the caller
 * prefixes the node). */
static int run_node(ctx *c, const Onnx__NodeProto *n) {
    const char *op = n->op_type ? n->op_type : "";
    int64_t opset = c->opset;
    char key[160];
    if (n->domain && !strcmp(n->domain, OARI_ONNX_TRAINING_DOMAIN)) {
        snprintf(key, sizeof key, "%s:%s", n->domain, op);
        op = key;
        opset = c->training_opset;
    } else if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) {
        return oari_error(OAR_ERR_UNSUPPORTED, "domain '%s' is not supported", n->domain);
    }
    if (opset < 1) return oari_error(OAR_ERR_INVALID, "the model imports no opset of the node's domain");
    const oari_onnx_op *row = oari_onnx_find_op(op, opset);
    if (!row) return OAR_ERR_UNSUPPORTED;
    if (n->n_input > OARI_ONNX_MAX_IO || n->n_output > OARI_ONNX_MAX_IO)
        return oari_error(OAR_ERR_UNSUPPORTED, "%zu inputs, %zu outputs (at most %d each)", n->n_input,
                          n->n_output, OARI_ONNX_MAX_IO);
    if (n->n_output < 1) return oari_error(OAR_ERR_INVALID, "no output");
    oari_onnx_node nd = {.n = n, .opset = opset, .static_shapes = c->static_shapes,
                         .n_in = (int)n->n_input, .n_out = (int)n->n_output, .ctx = c};
    const oari_onnx_svec *sym[OARI_ONNX_MAX_IO] = {0};
    bool any = false;
    for (size_t i = 0; i < n->n_input; i++) {
        if (!n->input[i][0]) continue; /* an omitted optional input */
        entry *e = lookup(c, n->input[i]);
        if (!e) return oari_error(OAR_ERR_INVALID, "input '%s' is not defined before the node", n->input[i]);
        nd.in[i] = e->t;
        sym[i] = sym_of(c, e);
        any = any || sym[i];
    }
    /* symbolic sizes: into a shape as placeholder sizes, through shape
     * arithmetic as polynomials, anywhere else computed at run time */
    oari_onnx_svec out_sym;
    int have = 0;
    if (!c->static_shapes && nd.n_in > 0 && nd.in[0] && (!strcmp(op, "Shape") || !strcmp(op, "Size"))) {
        if (!strcmp(op, "Size")) {
            have = oari_onnx_sym_size(nd.in[0], &out_sym);
        } else {
            int r = oar_tensor_ndim(nd.in[0]);
            int64_t start = oari_onnx_attr_i(&nd, "start", 0), end = oari_onnx_attr_i(&nd, "end", r);
            start = start < 0 ? start + r : start;
            end = end < 0 ? end + r : end;
            start = start < 0 ? 0 : start > r ? r : start;
            end = end < start ? start : end > r ? r : end;
            have = oari_onnx_sym_shape(nd.in[0], start, end, &out_sym);
        }
    } else if (any && !strcmp(op, "Range")) { /* to a dynamic length */
        if (!(nd.out[0] = oari_onnx_sym_range(&nd, sym))) return OAR_ERR_UNSUPPORTED;
        row = NULL;
    } else if (any) {
        char what[64];
        bool rest = false;
        for (int i = 0; i < nd.n_in; i++) {
            if (!sym[i] || !size_sink(op, i)) {
                rest = rest || sym[i];
                continue;
            }
            snprintf(what, sizeof what, "input %d (a shape)", i);
            if (!(nd.in[i] = oari_onnx_sym_concrete(sym[i], oar_tensor_dtype(nd.in[i]), what)))
                return OAR_ERR_UNSUPPORTED;
            sym[i] = NULL;
        }
        if (rest && oari_onnx_sym_carries(op)) have = oari_onnx_sym_node(&nd, sym, &out_sym);
        for (int i = 0; i < nd.n_in && rest && !have; i++) {
            if (!sym[i]) continue;
            if (!(nd.in[i] = oari_onnx_sym_runtime(sym[i], oar_tensor_dtype(nd.in[i]), c->sym_src, c->sym_dim))) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", oar_last_error());
                return oari_error(OAR_ERR_UNSUPPORTED, "input %d '%s': %s", i, n->input[i], msg);
            }
        }
    }
    int st = 0, folded = 0;
    if (row && c->fold_qdq && !any && (!strcmp(op, "Conv") || !strcmp(op, "MatMul") || !strcmp(op, "Gemm"))) {
        oari_onnx_dq dq[OARI_ONNX_MAX_IO];
        for (int i = 0; i < nd.n_in; i++) dequantized(c, &nd, i, &dq[i]);
        if ((folded = oari_onnx_qdq_fold(&nd, dq)) < 0) return folded;
        c->n_folded += folded;
    }
    if (!folded && row) st = row->fn(&nd);
    if (st) return st;
    if (have && nd.out[0] && !oari_onnx_svec_dynamic(&out_sym)) { /* exact constants, not placeholders */
        if (!(nd.out[0] = oari_onnx_sym_concrete(&out_sym, oar_tensor_dtype(nd.out[0]), "output")))
            return OAR_ERR_INVALID;
        have = 0;
    }
    for (size_t j = 0; j < n->n_output; j++) {
        if (!n->output[j][0]) continue;
        if (!nd.out[j])
            return oari_error(OAR_ERR_UNSUPPORTED, "output %zu '%s' is not supported", j, n->output[j]);
        if (!c->static_shapes && (st = oari_onnx_sym_check(nd.out[j]))) return st;
        if ((st = bind(c, n->output[j], nd.out[j]))) return st;
        c->map[c->n - 1].producer = n;
        if (j == 0 && have && (c->map[c->n - 1].sym = keep_sym(c, &out_sym)) < 0) return oari_fail_status();
    }
    return 0;
}

static int run_nodes(ctx *c, Onnx__NodeProto *const *nodes, size_t n_node, const char *where) {
    for (size_t k = 0; k < n_node; k++) {
        const Onnx__NodeProto *n = nodes[k];
        int st = run_node(c, n);
        if (st) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            return oari_error(st, "%snode %zu '%s' (%s, opset %lld): %s", where, k, n->name ? n->name : "",
                              n->op_type ? n->op_type : "?", (long long)c->opset, msg);
        }
    }
    return 0;
}

#define MAX_DEPTH 8 /* nested sub-graphs */

int oari_onnx_run_subgraph(oari_onnx_node *nd, const Onnx__GraphProto *g, int n_in, oar_tensor *const *in,
                           int n_out, oar_tensor **out) {
    ctx *c = nd->ctx;
    static _Thread_local int depth;
    if (!g) return oari_error(OAR_ERR_INVALID, "the sub-graph is missing");
    if ((int)g->n_input != n_in || (int)g->n_output != n_out)
        return oari_error(OAR_ERR_INVALID, "sub-graph '%s' has %zu inputs, %zu outputs (expected %d, %d)",
                          g->name ? g->name : "", g->n_input, g->n_output, n_in, n_out);
    if (depth >= MAX_DEPTH) return oari_error(OAR_ERR_UNSUPPORTED, "sub-graphs nested deeper than %d", MAX_DEPTH);
    size_t mark = c->n;
    int st = 0;
    for (int i = 0; i < n_in && !st; i++) st = bind(c, g->input[i]->name ? g->input[i]->name : "", in[i]);
    for (size_t i = 0; i < g->n_initializer && !st; i++) {
        oar_tensor *t = oari_onnx_tensor_of(g->initializer[i], "initializer");
        st = t ? bind(c, g->initializer[i]->name ? g->initializer[i]->name : "", t) : OAR_ERR_INVALID;
    }
    char where[160];
    snprintf(where, sizeof where, "sub-graph '%s' ", g->name ? g->name : "");
    depth++;
    if (!st) st = run_nodes(c, g->node, g->n_node, where);
    depth--;
    for (int j = 0; j < n_out && !st; j++) {
        entry *e = lookup(c, g->output[j]->name ? g->output[j]->name : "");
        if (!e) st = oari_error(OAR_ERR_INVALID, "sub-graph output '%s' is not computed", g->output[j]->name);
        else if (sym_of(c, e)) /* sizes leaving a sub-graph: computed at run time */
            st = (out[j] = oari_onnx_sym_runtime(sym_of(c, e), oar_tensor_dtype(e->t), c->sym_src, c->sym_dim))
                     ? 0 : OAR_ERR_UNSUPPORTED;
        else out[j] = e->t;
    }
    c->n = mark; /* the sub-graph's names go out of scope */
    return st;
}

static int trace_fn(void *vc, oar_tensor *const *inputs, oar_tensor **outputs) {
    ctx *c = vc;
    Onnx__GraphProto *g = c->g;
    int st;
    const oar_graph *tg = oari_trace_graph();
    for (size_t i = 0; i < c->n_in; i++) {
        if ((st = bind(c, c->in_names[i], inputs[i]))) return st;
        for (int d = 0; d < oar_tensor_ndim(inputs[i]); d++) { /* where size_of reads each symbol */
            int32_t k = 0;
            int s = oari_graph_sym_of(tg, oar_tensor_shape(inputs[i])[d], &k);
            if (s >= 0 && k == 1 && !c->sym_src[s]) {
                c->sym_src[s] = inputs[i];
                c->sym_dim[s] = d;
            }
        }
    }
    for (size_t i = 0; i < c->n_bound; i++)
        if ((st = bind(c, c->bound_names[i], c->bound[i]))) return st;
    for (size_t i = 0; i < g->n_initializer; i++) {
        oar_tensor *t = oari_onnx_tensor_of(g->initializer[i], "initializer");
        if (!t) return OAR_ERR_INVALID;
        if ((st = bind(c, g->initializer[i]->name ? g->initializer[i]->name : "", t))) return st;
    }
    if ((st = run_nodes(c, g->node, g->n_node, "onnx: "))) return st;
    for (size_t j = 0; j < g->n_output; j++) {
        entry *e = lookup(c, g->output[j]->name ? g->output[j]->name : "");
        if (!e) return oari_error(OAR_ERR_INVALID, "onnx: graph output '%s' is not computed", g->output[j]->name);
        /* an output that is an input gets its own node */
        bool wrap = false;
        for (size_t i = 0; i < c->n_in; i++) wrap = wrap || e->t == inputs[i];
        const oari_onnx_svec *sv = sym_of(c, e);
        if (sv) /* sizes as an output: computed at run time */
            outputs[j] = oari_onnx_sym_runtime(sv, oar_tensor_dtype(e->t), c->sym_src, c->sym_dim);
        else
            outputs[j] = wrap ? oar_clone(e->t) : e->t;
        if (!outputs[j]) return OAR_ERR_INVALID;
    }
    return 0;
}

#define MAX_GRAPH_IO 64

static oar_graph *import_model(Onnx__ModelProto *m, const oar_onnx_options *opt) {
    Onnx__GraphProto *g = m->graph;
    if (!g) {
        oari_error(OAR_ERR_INVALID, "onnx: the model has no graph");
        return NULL;
    }
    ctx c = {.g = g, .opset = -1, .static_shapes = true, .fold_qdq = !(opt && opt->keep_qdq), .training_opset = -1};
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) c.opset = o->has_version ? o->version : 1;
        else if (!strcmp(o->domain, OARI_ONNX_TRAINING_DOMAIN)) c.training_opset = o->has_version ? o->version : 1;
    }
    /* a model of training ops only may import no default opset */
    if ((c.opset != -1 || c.training_opset == -1) && (c.opset < OARI_ONNX_MIN_OPSET || c.opset > OARI_ONNX_MAX_OPSET)) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: opset %lld of the default domain is not supported (%d..%d)",
                   (long long)c.opset, OARI_ONNX_MIN_OPSET, OARI_ONNX_MAX_OPSET);
        return NULL;
    }
    if (g->n_output < 1 || g->n_input > MAX_GRAPH_IO || g->n_output > MAX_GRAPH_IO) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %zu inputs, %zu outputs (1..%d outputs, up to %d inputs)",
                   g->n_input, g->n_output, MAX_GRAPH_IO, MAX_GRAPH_IO);
        return NULL;
    }
    oar_graph_input_spec specs[MAX_GRAPH_IO];
    const char *in_names[MAX_GRAPH_IO], *out_names[MAX_GRAPH_IO], *bound_names[MAX_GRAPH_IO];
    oar_tensor *bound[MAX_GRAPH_IO];
    size_t k = 0; /* index among the non-initializer inputs */
    for (size_t i = 0; i < g->n_input; i++) {
        const Onnx__ValueInfoProto *v = g->input[i];
        if (!v->name || is_initializer(g, v->name)) continue;
        size_t idx = k++;
        if (opt && opt->values && (int)idx < opt->n_values && opt->values[idx]) {
            bound_names[c.n_bound] = v->name;
            bound[c.n_bound++] = opt->values[idx];
            continue;
        }
        const Onnx__TypeProto *tp = v->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type->shape) {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s' is not a tensor of known rank (sequences, maps "
                       "and optionals are not supported)", v->name);
            return NULL;
        }
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        oar_graph_input_spec *s = &specs[c.n_in];
        memset(s, 0, sizeof *s);
        s->name = v->name;
        s->dtype = oari_onnx_dtype(tt->elem_type);
        if (s->dtype == OAR_DTYPE_INVALID) {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s': element type %s (%d) is not an oar dtype", v->name,
                       elem_name(tt->elem_type), (int)tt->elem_type);
            return NULL;
        }
        if (tt->shape->n_dim > OAR_MAX_DIMS) {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s': rank %zu (at most %d)", v->name, tt->shape->n_dim,
                       OAR_MAX_DIMS);
            return NULL;
        }
        s->ndim = (int)tt->shape->n_dim;
        for (int d = 0; d < s->ndim; d++) {
            const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
            if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && dim->dim_value >= 0) {
                s->shape[d] = dim->dim_value;
            } else {
                s->shape[d] = -1;
                c.static_shapes = false;
                s->dim_names[d] =
                    dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dim->dim_param : NULL;
            }
        }
        /* dims whose product (zeros as 1, dynamic dims at their trace size)
         * overflows: even an empty tensor's strides multiply them */
        uint64_t span = oar_dtype_size(s->dtype);
        for (int d = 0; d < s->ndim; d++) {
            uint64_t x = s->shape[d] < 0 ? 1069 : s->shape[d] > 1 ? (uint64_t)s->shape[d] : 1;
            if (span > ((uint64_t)1 << 62) / x) {
                char buf[200];
                oari_error(OAR_ERR_INVALID, "onnx: input '%s': shape %s overflows", v->name,
                           oari_shape_str(buf, s->ndim, s->shape));
                return NULL;
            }
            span *= x;
        }
        in_names[c.n_in++] = v->name;
    }
    if (opt && opt->values && opt->n_values != (int)k) {
        oari_error(OAR_ERR_INVALID, "onnx: %d bound values for %zu graph inputs", opt->n_values, k);
        return NULL;
    }
    for (size_t j = 0; j < g->n_output; j++) out_names[j] = g->output[j]->name ? g->output[j]->name : "";
    c.in_names = in_names;
    c.bound_names = bound_names;
    c.bound = bound;
    oar_graph *graph = oar_trace(trace_fn, &c, (int)c.n_in, specs, (int)g->n_output,
                                 &(oar_trace_options){.output_names = out_names});
    oari_free(c.map, c.cap * sizeof *c.map);
    oari_free(c.syms, c.cap_syms * sizeof *c.syms);
    /* the dequantize nodes the folded ones bypassed */
    if (graph && c.n_folded && (oari_pass_dce(graph) < 0 || oari_graph_compact(graph))) {
        oar_graph_free(graph);
        return NULL;
    }
    return graph;
}

OAR_API oar_graph *oar_onnx_load_buffer_with(const void *data, size_t n, const oar_onnx_options *opt) {
    if (!data && n) {
        oari_error(OAR_ERR_INVALID, "oar_onnx_load_buffer: NULL data");
        return NULL;
    }
    if (opt && opt->n_values < 0) {
        oari_error(OAR_ERR_INVALID, "oar_onnx_load_buffer: n_values %d < 0", opt->n_values);
        return NULL;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pb_allocator, n, data);
    if (!m) {
        oari_error(OAR_ERR_INVALID, "onnx: not a valid ONNX model (protobuf ModelProto parse failed, %zu bytes)", n);
        return NULL;
    }
    oar_graph *g = import_model(m, opt);
    onnx__model_proto__free_unpacked(m, &pb_allocator);
    return g;
}

OAR_API oar_graph *oar_onnx_load_buffer(const void *data, size_t n) { return oar_onnx_load_buffer_with(data, n, NULL); }

/* The whole file in a new buffer of *n bytes (+1 allocated), or NULL. */
static void *read_file(const char *path, size_t *n, const char *fn) {
    if (!path) {
        oari_error(OAR_ERR_INVALID, "%s: NULL path", fn);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        oari_error(OAR_ERR_IO, "%s: cannot open '%s'", fn, path);
        return NULL;
    }
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        oari_error(OAR_ERR_IO, "%s: cannot size '%s'", fn, path);
        return NULL;
    }
    void *buf = oari_malloc((size_t)len + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    if (got != (size_t)len) {
        oari_free(buf, (size_t)len + 1);
        oari_error(OAR_ERR_IO, "%s: short read of '%s'", fn, path);
        return NULL;
    }
    *n = got;
    return buf;
}

/* path's folder in a new string of *size bytes ("." for a bare name), or NULL. */
static char *folder_of(const char *path, size_t *size) {
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 1;
    if (slash && len == 0) len = 1; /* "/model.onnx" */
    char *dir = oari_malloc(len + 1);
    if (!dir) return NULL;
    memcpy(dir, slash ? path : ".", len);
    dir[len] = 0;
    *size = len + 1;
    return dir;
}

OAR_API oar_graph *oar_onnx_load_with(const char *path, const oar_onnx_options *opt) {
    size_t n = 0, dsize = 0;
    void *buf = read_file(path, &n, "oar_onnx_load");
    if (!buf) return NULL;
    char *dir = folder_of(path, &dsize);
    if (!dir) {
        oari_free(buf, n + 1);
        return NULL;
    }
    const char *outer = model_dir; /* (a load from inside a load keeps its own) */
    model_dir = dir;
    oar_graph *g = oar_onnx_load_buffer_with(buf, n, opt);
    model_dir = outer;
    oari_free(dir, dsize);
    oari_free(buf, n + 1);
    return g;
}

OAR_API oar_graph *oar_onnx_load(const char *path) { return oar_onnx_load_with(path, NULL); }

OAR_API oar_tensor *oar_onnx_tensor_load_buffer(const void *data, size_t n) {
    if (!data && n) {
        oari_error(OAR_ERR_INVALID, "oar_onnx_tensor_load_buffer: NULL data");
        return NULL;
    }
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&pb_allocator, n, data);
    if (!tp) {
        oari_error(OAR_ERR_INVALID, "onnx: not a valid TensorProto (protobuf parse failed, %zu bytes)", n);
        return NULL;
    }
    oar_tensor *t = oari_onnx_tensor_of(tp, "tensor");
    onnx__tensor_proto__free_unpacked(tp, &pb_allocator);
    return t;
}

OAR_API oar_tensor *oar_onnx_tensor_load(const char *path) {
    size_t n = 0;
    void *buf = read_file(path, &n, "oar_onnx_tensor_load");
    if (!buf) return NULL;
    oar_tensor *t = oar_onnx_tensor_load_buffer(buf, n);
    if (!t) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", oar_last_error());
        oari_error(OAR_ERR_INVALID, "%s: %s", path, msg);
    }
    oari_free(buf, n + 1);
    return t;
}

int oari_onnx_model_ops(const void *data, size_t n, int64_t *opset, char *ops, size_t size) {
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pb_allocator, n, data);
    if (!m) return oari_error(OAR_ERR_INVALID, "onnx: not a valid ONNX model (%zu bytes)", n);
    *opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) *opset = o->has_version ? o->version : 1;
    }
    size_t len = 0;
    if (size) ops[0] = 0;
    for (size_t k = 0; m->graph && k < m->graph->n_node && len < size; k++) {
        const Onnx__NodeProto *nd = m->graph->node[k];
        bool other = nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx");
        int w = snprintf(ops + len, size - len, "%s%s%s%s", k ? "," : "", other ? nd->domain : "", other ? ":" : "",
                         nd->op_type ? nd->op_type : "?");
        len += w > 0 ? (size_t)w : 0;
    }
    onnx__model_proto__free_unpacked(m, &pb_allocator);
    return 0;
}

/* ONNX import (include/oar/onnx.h): parse the ModelProto with protobuf-c
 * (bindings generated at build time from Debian's onnx.proto) and trace the
 * node list through the public ops. */
#include "../core/core.h"
#include "onnx.pb-c.h"
#include <oar/onnx.h>
#include <oar/ops.h>
#include <stddef.h>
#include <stdio.h>
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

typedef struct {
    const char *name;
    oar_tensor *t;
    bool is_const; /* concrete (initializer, Constant, or computed from them) */
} entry;

typedef struct {
    Onnx__GraphProto *g;
    int64_t opset;
    entry *map;
    size_t n, cap;
    size_t n_in;
    const char **in_names; /* the non-initializer graph inputs */
} ctx;

static entry *lookup(ctx *c, const char *name) {
    for (size_t i = c->n; i-- > 0;)
        if (!strcmp(c->map[i].name, name)) return &c->map[i];
    return NULL;
}

static int bind(ctx *c, const char *name, oar_tensor *t, bool is_const) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        entry *m = oari_realloc(c->map, c->cap * sizeof *m, cap * sizeof *m);
        if (!m) return OAR_ERR_NOMEM;
        c->map = m;
        c->cap = cap;
    }
    c->map[c->n++] = (entry){name, t, is_const};
    return 0;
}

static bool is_initializer(Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name && !strcmp(g->initializer[i]->name, name)) return true;
    return false;
}

/* A concrete tensor from a TensorProto (typed fields or raw_data). */
static oar_tensor *tensor_of(const Onnx__TensorProto *tp, const char *what) {
    const char *name = tp->name ? tp->name : "";
    if (tp->n_dims > OAR_MAX_DIMS) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': %zu dims (max %d)", what, name, tp->n_dims, OAR_MAX_DIMS);
        return NULL;
    }
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': external data is not supported", what, name);
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
    oar_dtype dt;
    size_t esz, n_typed;
    const void *typed;
    switch (tp->data_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: dt = OAR_F32; esz = 4; n_typed = tp->n_float_data; typed = tp->float_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: dt = OAR_F64; esz = 8; n_typed = tp->n_double_data; typed = tp->double_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: dt = OAR_I64; esz = 8; n_typed = tp->n_int64_data; typed = tp->int64_data; break;
    default:
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %s '%s': element type %d is not supported (float, double, int64)",
                   what, name, (int)tp->data_type);
        return NULL;
    }
    const void *src = typed;
    size_t have = n_typed * esz;
    if (tp->has_raw_data) {
        src = tp->raw_data.data; /* little-endian, as on every host oar runs on */
        have = tp->raw_data.len;
    }
    if (have != (size_t)count * esz) {
        oari_error(OAR_ERR_INVALID, "onnx: %s '%s': %zu data bytes for %lld elements of %zu bytes", what, name,
                   have, (long long)count, esz);
        return NULL;
    }
    return oar_tensor_from_data(count ? src : NULL, dt, (int)tp->n_dims, shape);
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}
static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_i ? a->i : def;
}
static double attr_f(const Onnx__NodeProto *n, const char *name, double def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_f ? a->f : def;
}
/* ints attribute of exactly `len` entries into out, or def when absent. */
static int attr_ints(const Onnx__NodeProto *n, const char *name, size_t len, int64_t *out, int64_t def) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a) {
        for (size_t i = 0; i < len; i++) out[i] = def;
        return 0;
    }
    if (a->n_ints != len)
        return oari_error(OAR_ERR_UNSUPPORTED, "attribute %s has %zu entries, expected %zu", name, a->n_ints, len);
    memcpy(out, a->ints, len * sizeof *out);
    return 0;
}
/* 2-D pads [hb, wb, he, we]: only symmetric ones map to oar's padding. */
static int pads2(const Onnx__NodeProto *n, int64_t pad[2]) {
    const Onnx__AttributeProto *ap = attr(n, "auto_pad");
    if (ap && ap->has_s && !(ap->s.len == 6 && !memcmp(ap->s.data, "NOTSET", 6)))
        return oari_error(OAR_ERR_UNSUPPORTED, "auto_pad other than NOTSET is not supported");
    int64_t p[4];
    int st = attr_ints(n, "pads", 4, p, 0);
    if (st) return st;
    if (p[0] != p[2] || p[1] != p[3])
        return oari_error(OAR_ERR_UNSUPPORTED, "asymmetric pads [%lld, %lld, %lld, %lld] are not supported",
                          (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3]);
    pad[0] = p[0];
    pad[1] = p[1];
    return 0;
}

/* x reshaped to 2-D [prod(dims < axis), prod(dims >= axis)]. */
static oar_tensor *flatten2d(oar_tensor *x, int64_t axis) {
    int nd = oar_tensor_ndim(x);
    if (axis < 0) axis += nd;
    if (axis < 0 || axis > nd) {
        oari_error(OAR_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, nd);
        return NULL;
    }
    const int64_t *s = oar_tensor_shape(x);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < nd; d++) *(d < axis ? &outer : &inner) *= s[d];
    return oar_reshape(x, 2, (int64_t[]){outer, inner});
}

static int64_t norm_axis(int64_t axis, int nd) { return axis < 0 ? axis + nd : axis; }

/* One node: its outputs bound in the map. Errors name nothing (the caller
 * prefixes the node). */
static int run_node(ctx *c, const Onnx__NodeProto *n) {
    const char *op = n->op_type ? n->op_type : "";
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx"))
        return oari_error(OAR_ERR_UNSUPPORTED, "domain '%s' is not supported", n->domain);
    oar_tensor *in[3] = {NULL, NULL, NULL};
    bool all_const = true;
    if (n->n_input > 3 && strcmp(op, "Constant"))
        return oari_error(OAR_ERR_UNSUPPORTED, "%zu inputs (at most 3 supported)", n->n_input);
    for (size_t i = 0; i < n->n_input && i < 3; i++) {
        if (!n->input[i][0]) continue; /* an omitted optional input */
        entry *e = lookup(c, n->input[i]);
        if (!e) return oari_error(OAR_ERR_INVALID, "input '%s' is not defined before the node", n->input[i]);
        in[i] = e->t;
        all_const = all_const && e->is_const;
    }
    if (n->n_output < 1) return oari_error(OAR_ERR_INVALID, "no output");
#define NEED(k)                                                                                           \
    do {                                                                                                  \
        for (int i_ = 0; i_ < (k); i_++)                                                                  \
            if (!in[i_]) return oari_error(OAR_ERR_INVALID, "needs %d inputs", (k));                      \
    } while (0)
    oar_tensor *y = NULL;
    int st;
    if (!strcmp(op, "Add")) { NEED(2); y = oar_add(in[0], in[1]); }
    else if (!strcmp(op, "Sub")) { NEED(2); y = oar_sub(in[0], in[1]); }
    else if (!strcmp(op, "Mul")) { NEED(2); y = oar_mul(in[0], in[1]); }
    else if (!strcmp(op, "Div")) { NEED(2); y = oar_div(in[0], in[1]); }
    else if (!strcmp(op, "MatMul")) { NEED(2); y = oar_matmul(in[0], in[1]); }
    else if (!strcmp(op, "Relu")) { NEED(1); y = oar_relu(in[0]); }
    else if (!strcmp(op, "Sigmoid")) { NEED(1); y = oar_sigmoid(in[0]); }
    else if (!strcmp(op, "Tanh")) { NEED(1); y = oar_tanh(in[0]); }
    else if (!strcmp(op, "Identity")) { NEED(1); y = in[0]; }
    else if (!strcmp(op, "Constant")) {
        const Onnx__AttributeProto *a = attr(n, "value");
        if (!a || !a->t) return oari_error(OAR_ERR_UNSUPPORTED, "only the 'value' tensor attribute is supported");
        if (!(y = tensor_of(a->t, "Constant value"))) return OAR_ERR_INVALID;
        all_const = true;
    } else if (!strcmp(op, "Gemm")) {
        NEED(2);
        double alpha = attr_f(n, "alpha", 1.0), beta = attr_f(n, "beta", 1.0);
        oar_tensor *a = attr_i(n, "transA", 0) ? oar_transpose(in[0], 0, 1) : in[0];
        oar_tensor *b = a && attr_i(n, "transB", 0) ? oar_transpose(in[1], 0, 1) : in[1];
        y = a && b ? oar_matmul(a, b) : NULL;
        if (y && alpha != 1.0) y = oar_mul_scalar(y, alpha);
        if (y && in[2] && beta != 0.0) y = oar_add(y, beta != 1.0 ? oar_mul_scalar(in[2], beta) : in[2]);
    } else if (!strcmp(op, "Softmax")) {
        NEED(1);
        int nd = oar_tensor_ndim(in[0]);
        if (c->opset >= 13) {
            y = oar_softmax(in[0], (int)norm_axis(attr_i(n, "axis", -1), nd));
        } else { /* opset < 13: softmax over the 2-D flattening at axis */
            oar_tensor *f = flatten2d(in[0], attr_i(n, "axis", 1));
            oar_tensor *s = f ? oar_softmax(f, 1) : NULL;
            y = s ? oar_reshape(s, nd, oar_tensor_shape(in[0])) : NULL;
        }
    } else if (!strcmp(op, "Flatten")) {
        NEED(1);
        y = flatten2d(in[0], attr_i(n, "axis", 1));
    } else if (!strcmp(op, "Reshape")) {
        NEED(2);
        entry *e = lookup(c, n->input[1]);
        if (!e->is_const || oar_tensor_dtype(in[1]) != OAR_I64 || oar_tensor_ndim(in[1]) != 1)
            return oari_error(OAR_ERR_UNSUPPORTED, "the shape must be a constant 1-D int64 tensor");
        if (attr_i(n, "allowzero", 0)) return oari_error(OAR_ERR_UNSUPPORTED, "allowzero=1 is not supported");
        int64_t k = oar_tensor_shape(in[1])[0];
        if (k > OAR_MAX_DIMS) return oari_error(OAR_ERR_UNSUPPORTED, "target rank %lld", (long long)k);
        const int64_t *v = oar_tensor_data(in[1]);
        int64_t shape[OAR_MAX_DIMS];
        int nd = oar_tensor_ndim(in[0]);
        for (int64_t i = 0; i < k; i++) {
            shape[i] = v[i];
            if (v[i] == 0) { /* 0 copies the input's dim */
                if (i >= nd) return oari_error(OAR_ERR_INVALID, "shape[%lld] = 0 past the input's rank", (long long)i);
                shape[i] = oar_tensor_shape(in[0])[i];
            }
        }
        y = oar_reshape(in[0], (int)k, shape);
    } else if (!strcmp(op, "Transpose")) {
        NEED(1);
        int nd = oar_tensor_ndim(in[0]);
        int64_t perm[OAR_MAX_DIMS];
        if (attr(n, "perm")) {
            if ((st = attr_ints(n, "perm", (size_t)nd, perm, 0))) return st;
        } else {
            for (int d = 0; d < nd; d++) perm[d] = nd - 1 - d;
        }
        y = oar_permute(in[0], perm);
    } else if (!strcmp(op, "Conv")) {
        NEED(2);
        if (oar_tensor_ndim(in[1]) != 4) return oari_error(OAR_ERR_UNSUPPORTED, "only 2-D convolution is supported");
        int64_t stride[2], dil[2], pad[2], ks[2];
        if ((st = attr_ints(n, "strides", 2, stride, 1)) || (st = attr_ints(n, "dilations", 2, dil, 1)) ||
            (st = pads2(n, pad)) || (st = attr_ints(n, "kernel_shape", 2, ks, 0)))
            return st;
        y = oar_conv2d(in[0], in[1], in[2], stride, pad, dil, attr_i(n, "group", 1));
    } else if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool")) {
        NEED(1);
        if (oar_tensor_ndim(in[0]) != 4) return oari_error(OAR_ERR_UNSUPPORTED, "only 2-D pooling is supported");
        if (n->n_output > 1 && n->output[1][0])
            return oari_error(OAR_ERR_UNSUPPORTED, "the Indices output is not supported");
        if (attr_i(n, "storage_order", 0)) return oari_error(OAR_ERR_UNSUPPORTED, "storage_order=1 is not supported");
        int64_t ks[2], stride[2], dil[2], pad[2];
        if (!attr(n, "kernel_shape")) return oari_error(OAR_ERR_INVALID, "kernel_shape is required");
        if ((st = attr_ints(n, "kernel_shape", 2, ks, 0)) || (st = attr_ints(n, "strides", 2, stride, 1)) ||
            (st = attr_ints(n, "dilations", 2, dil, 1)) || (st = pads2(n, pad)))
            return st;
        bool ceil = attr_i(n, "ceil_mode", 0) != 0;
        if (op[0] == 'M') {
            y = oar_max_pool2d(in[0], ks, stride, pad, dil, ceil, NULL);
        } else {
            if (dil[0] != 1 || dil[1] != 1) return oari_error(OAR_ERR_UNSUPPORTED, "dilated AveragePool");
            y = oar_avg_pool2d(in[0], ks, stride, pad, ceil, attr_i(n, "count_include_pad", 0) != 0);
        }
    } else if (!strcmp(op, "GlobalAveragePool")) {
        NEED(1);
        int nd = oar_tensor_ndim(in[0]);
        if (nd < 3) return oari_error(OAR_ERR_INVALID, "input rank %d < 3", nd);
        int64_t dims[OAR_MAX_DIMS];
        for (int d = 2; d < nd; d++) dims[d - 2] = d;
        y = oar_mean(in[0], nd - 2, dims, true);
    } else {
        return oari_error(OAR_ERR_UNSUPPORTED, "op is not supported");
    }
#undef NEED
    if (!y) return OAR_ERR_INVALID;
    if (n->n_output > 1 && strcmp(op, "MaxPool") && strcmp(op, "AveragePool"))
        return oari_error(OAR_ERR_UNSUPPORTED, "%zu outputs (1 supported)", n->n_output);
    return bind(c, n->output[0], y, all_const);
}

static int trace_fn(void *vc, oar_tensor *const *inputs, oar_tensor **outputs) {
    ctx *c = vc;
    Onnx__GraphProto *g = c->g;
    int st;
    for (size_t i = 0; i < c->n_in; i++)
        if ((st = bind(c, c->in_names[i], inputs[i], false))) return st;
    for (size_t i = 0; i < g->n_initializer; i++) {
        oar_tensor *t = tensor_of(g->initializer[i], "initializer");
        if (!t) return OAR_ERR_INVALID;
        if ((st = bind(c, g->initializer[i]->name ? g->initializer[i]->name : "", t, true))) return st;
    }
    for (size_t k = 0; k < g->n_node; k++) {
        const Onnx__NodeProto *n = g->node[k];
        if ((st = run_node(c, n))) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            return oari_error(st, "onnx: node %zu '%s' (%s, opset %lld): %s", k, n->name ? n->name : "",
                              n->op_type ? n->op_type : "?", (long long)c->opset, msg);
        }
    }
    for (size_t j = 0; j < g->n_output; j++) {
        entry *e = lookup(c, g->output[j]->name ? g->output[j]->name : "");
        if (!e) return oari_error(OAR_ERR_INVALID, "onnx: graph output '%s' is not computed", g->output[j]->name);
        /* an output that is an input or a constant gets its own node */
        bool wrap = e->is_const;
        for (size_t i = 0; i < c->n_in; i++) wrap = wrap || e->t == inputs[i];
        outputs[j] = wrap ? oar_mul_scalar(e->t, 1.0) : e->t;
        if (!outputs[j]) return OAR_ERR_INVALID;
    }
    return 0;
}

static oar_graph *import_model(Onnx__ModelProto *m) {
    Onnx__GraphProto *g = m->graph;
    if (!g) {
        oari_error(OAR_ERR_INVALID, "onnx: the model has no graph");
        return NULL;
    }
    ctx c = {.g = g, .opset = -1};
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) c.opset = o->has_version ? o->version : 1;
    }
    if (c.opset < 7 || c.opset > 17) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: opset %lld of the default domain is not supported (7..17)",
                   (long long)c.opset);
        return NULL;
    }
    if (g->n_output < 1 || g->n_input > 64 || g->n_output > 64) {
        oari_error(OAR_ERR_UNSUPPORTED, "onnx: %zu inputs, %zu outputs (1..64 outputs, up to 64 inputs)",
                   g->n_input, g->n_output);
        return NULL;
    }
    oar_graph_input_spec specs[64];
    const char *in_names[64], *out_names[64];
    for (size_t i = 0; i < g->n_input; i++) {
        const Onnx__ValueInfoProto *v = g->input[i];
        if (!v->name || is_initializer(g, v->name)) continue;
        const Onnx__TypeProto *tp = v->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type->shape) {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s' is not a tensor of known rank", v->name);
            return NULL;
        }
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        oar_graph_input_spec *s = &specs[c.n_in];
        memset(s, 0, sizeof *s);
        s->name = v->name;
        if (tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) s->dtype = OAR_F32;
        else if (tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) s->dtype = OAR_F64;
        else {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s': element type %d is not supported (float, double)",
                       v->name, (int)tt->elem_type);
            return NULL;
        }
        if (tt->shape->n_dim > OAR_MAX_DIMS) {
            oari_error(OAR_ERR_UNSUPPORTED, "onnx: input '%s': rank %zu", v->name, tt->shape->n_dim);
            return NULL;
        }
        s->ndim = (int)tt->shape->n_dim;
        for (int d = 0; d < s->ndim; d++) {
            const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
            if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && dim->dim_value >= 0) {
                s->shape[d] = dim->dim_value;
            } else {
                s->shape[d] = -1;
                s->dim_names[d] =
                    dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dim->dim_param : NULL;
            }
        }
        in_names[c.n_in++] = v->name;
    }
    for (size_t j = 0; j < g->n_output; j++) out_names[j] = g->output[j]->name ? g->output[j]->name : "";
    c.in_names = in_names;
    oar_graph *graph = oar_trace(trace_fn, &c, (int)c.n_in, specs, (int)g->n_output,
                                 &(oar_trace_options){.output_names = out_names});
    oari_free(c.map, c.cap * sizeof *c.map);
    return graph;
}

OAR_API oar_graph *oar_onnx_load_buffer(const void *data, size_t n) {
    if (!data && n) {
        oari_error(OAR_ERR_INVALID, "oar_onnx_load_buffer: NULL data");
        return NULL;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pb_allocator, n, data);
    if (!m) {
        oari_error(OAR_ERR_INVALID, "onnx: not a valid ONNX model (protobuf ModelProto parse failed, %zu bytes)", n);
        return NULL;
    }
    oar_graph *g = import_model(m);
    onnx__model_proto__free_unpacked(m, &pb_allocator);
    return g;
}

OAR_API oar_graph *oar_onnx_load(const char *path) {
    if (!path) {
        oari_error(OAR_ERR_INVALID, "oar_onnx_load: NULL path");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        oari_error(OAR_ERR_IO, "oar_onnx_load: cannot open '%s'", path);
        return NULL;
    }
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        oari_error(OAR_ERR_IO, "oar_onnx_load: cannot size '%s'", path);
        return NULL;
    }
    void *buf = oari_malloc((size_t)len + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    oar_graph *g = NULL;
    if (got != (size_t)len) oari_error(OAR_ERR_IO, "oar_onnx_load: short read of '%s'", path);
    else g = oar_onnx_load_buffer(buf, got);
    oari_free(buf, (size_t)len + 1);
    return g;
}

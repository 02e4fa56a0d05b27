/* ONNX export: the protobuf side. Every object of the model comes from one
 * arena (a list of oari_calloc blocks) freed at the end; the builders
 * append initializers, nodes and attributes to the export context and are
 * no-ops once a step failed (x->st), so an emitter reads straight through
 * and returns the first failure. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------------- */

void *oari_xp_alloc(oari_xp *x, size_t n) {
    if (x->st) return NULL;
    oari_xblk *b = oari_calloc(1, sizeof *b + n);
    if (!b) {
        x->st = OAR_ERR_NOMEM;
        return NULL;
    }
    b->h.next = x->mem;
    b->h.n = sizeof *b + n;
    x->mem = b;
    return b + 1;
}

void oari_xp_free(oari_xp *x) {
    for (oari_xblk *b = x->mem, *nx; b; b = nx) {
        nx = b->h.next;
        oari_free(b, b->h.n);
    }
    x->mem = NULL;
}

char *oari_xp_str(oari_xp *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? oari_xp_alloc(x, (size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Appends p to a growing array of pointers. */
static void push(oari_xp *x, void ***arr, size_t *n, size_t *cap, void *p) {
    if (x->st || !p) return;
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        void **a = oari_xp_alloc(x, nc * sizeof *a);
        if (!a) return;
        if (*n) memcpy(a, *arr, *n * sizeof *a);
        *arr = a; /* the old array stays in the arena until the end */
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
}

int oari_xp_fail(oari_xp *x, const char *fmt, ...) {
    if (x->st) return x->st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (x->node < 0)
        x->st = oari_error(OAR_ERR_UNSUPPORTED, "oar_onnx_export: %s", msg);
    else
        x->st = oari_error(OAR_ERR_UNSUPPORTED, "oar_onnx_export: node %d (%s): %s", x->node,
                           oari_gnode_def(&x->g->nodes[x->node])->name, msg);
    return x->st;
}

/* ---- types and initializers ---------------------------------------------------- */

int oari_xp_type(oar_dtype dt) {
    switch (dt) {
    case OAR_BOOL:
        return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    case OAR_U8:
        return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case OAR_I8:
        return ONNX__TENSOR_PROTO__DATA_TYPE__INT8;
    case OAR_I32:
        return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case OAR_I64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case OAR_F16:
        return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case OAR_BF16:
        return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case OAR_F32:
        return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case OAR_F64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case OAR_C64:
        return ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64;
    case OAR_C128:
        return ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128;
    default:
        return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
    }
}

const char *oari_xp_init(oari_xp *x, const char *name, oar_dtype dt, int ndim, const int64_t *shape,
                         const void *data, size_t nbytes, bool copy) {
    Onnx__TensorProto *t = oari_xp_alloc(x, sizeof *t);
    int64_t *dims = oari_xp_alloc(x, (size_t)(ndim ? ndim : 1) * sizeof *dims);
    uint8_t *raw = copy ? oari_xp_alloc(x, nbytes ? nbytes : 1) : (uint8_t *)data;
    if (!t || !dims || !raw || !name) return NULL;
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->n_dims = (size_t)ndim;
    if (ndim) memcpy(dims, shape, (size_t)ndim * sizeof *dims);
    t->dims = dims;
    t->has_data_type = 1;
    t->data_type = oari_xp_type(dt);
    t->has_raw_data = 1;
    if (copy && nbytes) memcpy(raw, data, nbytes);
    t->raw_data.data = raw;
    t->raw_data.len = nbytes;
    push(x, (void ***)&x->inits, &x->n_inits, &x->cap_inits, t);
    return x->st ? NULL : name;
}

const char *oari_xp_tmp(oari_xp *x) { return oari_xp_str(x, "/t%d", x->n_tmp++); }

const char *oari_xp_i64(oari_xp *x, int n, const int64_t *v) {
    return oari_xp_init(x, oari_xp_tmp(x), OAR_I64, 1, (const int64_t[]){n}, v,
                        (size_t)n * sizeof *v, true);
}

const char *oari_xp_i64_scalar(oari_xp *x, int64_t v) {
    return oari_xp_init(x, oari_xp_tmp(x), OAR_I64, 0, NULL, &v, sizeof v, true);
}

const char *oari_xp_scalar(oari_xp *x, oar_dtype dt, double v) {
    union {
        float f;
        double d;
        int64_t i;
        int32_t i32;
        uint8_t u8;
    } u;
    size_t n;
    switch (dt) {
    case OAR_F32:
        u.f = (float)v;
        n = 4;
        break;
    case OAR_F64:
        u.d = v;
        n = 8;
        break;
    case OAR_I64:
        u.i = (int64_t)v;
        n = 8;
        break;
    case OAR_I32:
        u.i32 = (int32_t)v;
        n = 4;
        break;
    case OAR_U8:
    case OAR_BOOL:
        u.u8 = (uint8_t)v;
        n = 1;
        break;
    case OAR_I8:
        u.u8 = (uint8_t)oari_f64_to_i8(v);
        n = 1;
        break;
    default:
        x->st = x->st ? x->st
                      : oari_error(OAR_ERR_UNSUPPORTED,
                                   "oar_onnx_export: node %d: a %s scalar constant "
                                   "is not supported",
                                   x->node, oar_dtype_name(dt));
        return NULL;
    }
    return oari_xp_init(x, oari_xp_tmp(x), dt, 0, NULL, &u, n, true);
}

const char *oari_xp_filled(oari_xp *x, oar_dtype dt, int ndim, const int64_t *shape, double v) {
    if (dt != OAR_F32 && dt != OAR_F64) {
        oari_xp_fail(x, "a %s constant of ones or zeros is not supported", oar_dtype_name(dt));
        return NULL;
    }
    int64_t cnt = 1;
    for (int d = 0; d < ndim; d++)
        cnt *= shape[d];
    size_t es = oar_dtype_size(dt);
    uint8_t *buf = oari_xp_alloc(x, (size_t)cnt * es + 1);
    for (int64_t i = 0; buf && i < cnt; i++) {
        if (dt == OAR_F32)
            ((float *)buf)[i] = (float)v;
        else
            ((double *)buf)[i] = v;
    }
    return buf ? oari_xp_init(x, oari_xp_tmp(x), dt, ndim, shape, buf, (size_t)cnt * es, false)
               : NULL;
}

/* A contiguous constant's bytes are referenced in place (the graph keeps it
 * alive), a strided one is gathered. */
int oari_xp_const(oari_xp *x, int v) {
    oar_tensor *t = x->g->values[v].constant;
    size_t es = oar_dtype_size(t->dtype);
    size_t nbytes = (size_t)t->numel * es;
    const uint8_t *src = oar_tensor_data(t); /* points at the first element */
    if (t->numel && !src)
        return x->st =
                   oari_error(OAR_ERR_UNSUPPORTED,
                              "oar_onnx_export: constant '%s' is not in host memory", x->names[v]);
    if (!t->numel || oar_tensor_is_contiguous(t)) {
        oari_xp_init(x, x->names[v], t->dtype, t->ndim, t->shape, src, nbytes, false);
        return x->st;
    }
    uint8_t *buf = oari_xp_alloc(x, nbytes);
    if (!buf) return x->st;
    int64_t idx[OAR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++)
            off += idx[d] * t->strides[d];
        memcpy(buf + (size_t)k * es, src + (size_t)off * es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    oari_xp_init(x, x->names[v], t->dtype, t->ndim, t->shape, buf, nbytes, false);
    return x->st;
}

/* ---- nodes and attributes -------------------------------------------------------- */

Onnx__NodeProto *oari_xp_node(oari_xp *x, const char *op, int n_in, const char *const *in,
                              int n_out, const char *const *out) {
    for (int i = 0; i < n_in; i++) /* NULL: a failed step before (its error is set) */
        if (!in[i] && !x->st)
            x->st = oari_error(OAR_ERR_INVALID, "oar_onnx_export: node %d: missing input", x->node);
    Onnx__NodeProto *nd = oari_xp_alloc(x, sizeof *nd);
    char **ins = oari_xp_alloc(x, (size_t)(n_in ? n_in : 1) * sizeof *ins);
    char **outs = oari_xp_alloc(x, (size_t)n_out * sizeof *outs);
    if (!nd || !ins || !outs) return NULL;
    onnx__node_proto__init(nd);
    for (int i = 0; i < n_in; i++)
        ins[i] = (char *)in[i];
    for (int j = 0; j < n_out; j++)
        outs[j] = (char *)(out && out[j] ? out[j] : oari_xp_tmp(x));
    nd->n_input = (size_t)n_in;
    nd->input = ins;
    nd->n_output = (size_t)n_out;
    nd->output = outs;
    nd->op_type = (char *)op;
    /* "<oar op><node index>/<ONNX op>_<k>": an ONNX Runtime message leads back to the oar node */
    if (x->node >= 0)
        nd->name = oari_xp_str(x, "%s%d/%s_%d", oari_gnode_def(&x->g->nodes[x->node])->name,
                               x->node, op, x->n_onnx_nodes++);
    else
        nd->name = oari_xp_str(x, "output/%s_%d", op, x->n_onnx_nodes++);
    push(x, (void ***)&x->nodes, &x->n_nodes, &x->cap_nodes, nd);
    return x->st ? NULL : nd;
}

Onnx__NodeProto *oari_xp_node1(oari_xp *x, const char *op, int n_in, const char *const *in,
                               const char *out) {
    return oari_xp_node(x, op, n_in, in, 1, (const char *const[]){out});
}

static Onnx__AttributeProto *add_attr(oari_xp *x, Onnx__NodeProto *nd, const char *name, int type) {
    if (!nd) return NULL;
    Onnx__AttributeProto *a = oari_xp_alloc(x, sizeof *a);
    Onnx__AttributeProto **arr = oari_xp_alloc(x, (nd->n_attribute + 1) * sizeof *arr);
    if (!a || !arr) return NULL;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    if (nd->n_attribute) memcpy(arr, nd->attribute, nd->n_attribute * sizeof *arr);
    arr[nd->n_attribute++] = a;
    nd->attribute = arr;
    return a;
}

void oari_xp_set_i(oari_xp *x, Onnx__NodeProto *nd, const char *name, int64_t v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = 1, a->i = v;
}

void oari_xp_set_f(oari_xp *x, Onnx__NodeProto *nd, const char *name, double v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->has_f = 1, a->f = (float)v;
}

void oari_xp_set_s(oari_xp *x, Onnx__NodeProto *nd, const char *name, const char *s) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (a) a->has_s = 1, a->s.data = (uint8_t *)s, a->s.len = strlen(s);
}

void oari_xp_set_ints(oari_xp *x, Onnx__NodeProto *nd, const char *name, int n, const int64_t *v) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = a ? oari_xp_alloc(x, (size_t)(n ? n : 1) * sizeof *c) : NULL;
    if (!c) return;
    memcpy(c, v, (size_t)n * sizeof *c);
    a->n_ints = (size_t)n;
    a->ints = c;
}

void oari_xp_set_graph(oari_xp *x, Onnx__NodeProto *nd, const char *name, Onnx__GraphProto *gp) {
    Onnx__AttributeProto *a = add_attr(x, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    if (a) a->g = gp;
}

Onnx__ValueInfoProto *oari_xp_value_info(oari_xp *x, const char *name, int v) {
    const oar_graph *g = x->g;
    const oari_gvalue *gv = &g->values[v];
    Onnx__ValueInfoProto *vi = oari_xp_alloc(x, sizeof *vi);
    Onnx__TypeProto *tp = oari_xp_alloc(x, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = oari_xp_alloc(x, sizeof *tt);
    Onnx__TensorShapeProto *sp = oari_xp_alloc(x, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims =
        oari_xp_alloc(x, (size_t)(gv->ndim ? gv->ndim : 1) * sizeof *dims);
    if (!vi || !tp || !tt || !sp || !dims) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < gv->ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = oari_xp_alloc(x, sizeof *dm);
        if (!dm) return NULL;
        onnx__tensor_shape_proto__dimension__init(dm);
        if (gv->sym[d] < 0) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = gv->shape[d];
        } else {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = gv->smul[d] == 1 ? (char *)g->syms[gv->sym[d]].name
                                             : oari_xp_str(x, "%d*%s", (int)gv->smul[d],
                                                           g->syms[gv->sym[d]].name);
        }
        dims[d] = dm;
    }
    sp->n_dim = (size_t)gv->ndim;
    sp->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = oari_xp_type(gv->dtype);
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

/* ---- sizes (dynamic dims) ----------------------------------------------------------- */

/* A [1] int64 tensor holding the run-time size of symbol s (Shape of the
 * first graph input carrying it, gathered at that dim), made once. */
static const char *sym_size(oari_xp *x, int s) {
    if (x->sym_dim[s]) return x->sym_dim[s];
    const oar_graph *g = x->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const oari_gvalue *v = &g->values[g->inputs[i]];
        for (int d = 0; d < v->ndim; d++) {
            if (v->sym[d] != s || v->smul[d] != 1) continue;
            const char *sh = NULL;
            for (int k = 0; k < x->n_shapes; k++)
                if (x->shape_in[k] == i) sh = x->shape_name[k];
            if (!sh && (sh = OP1("Shape", x->names[g->inputs[i]], NULL)) &&
                x->n_shapes < OARI_MAX_SYMS) {
                x->shape_in[x->n_shapes] = i;
                x->shape_name[x->n_shapes++] = sh;
            }
            Onnx__NodeProto *nd = oari_xp_node1(
                x, "Gather", 2, (const char *const[]){sh, oari_xp_i64(x, 1, (int64_t[]){d})}, NULL);
            oari_xp_set_i(x, nd, "axis", 0);
            return x->sym_dim[s] = oari_xp_out0(nd);
        }
    }
    oari_xp_fail(x, "no graph input carries the dynamic dim '%s'", g->syms[s].name);
    return NULL;
}

const char *oari_xp_sizes(oari_xp *x, int n, const int64_t *v, const int8_t *isym,
                          const int32_t *imul) {
    bool dyn = false;
    for (int k = 0; k < n; k++)
        dyn = dyn || isym[k] >= 0;
    if (!dyn) return oari_xp_i64(x, n, v);
    const char *parts[OAR_MAX_DIMS + OARI_MAX_IATTR];
    int np = 0;
    for (int k = 0; k < n;) {
        if (isym[k] >= 0) {
            const char *s = sym_size(x, isym[k]);
            parts[np++] =
                imul[k] == 1 ? s : OP2("Mul", s, oari_xp_i64(x, 1, (int64_t[]){imul[k]}), NULL);
            k++;
        } else {
            int k0 = k;
            while (k < n && isym[k] < 0)
                k++;
            parts[np++] = oari_xp_i64(x, k - k0, v + k0);
        }
    }
    if (np == 1) return parts[0];
    Onnx__NodeProto *nd = oari_xp_node1(x, "Concat", np, parts, NULL);
    oari_xp_set_i(x, nd, "axis", 0);
    return oari_xp_out0(nd);
}

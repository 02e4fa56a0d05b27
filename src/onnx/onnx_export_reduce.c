/* ONNX export emitters: reductions (sum ... amin, all/any, argmax/argmin,
 * cumsum, size_of), softmax, and the index ops (gather, scatter, one_hot,
 * sort, topk). Ops that share an emitter take the ONNX op type from their
 * row. */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"
#include <string.h>

/* ReduceSum takes the axes as an input from opset 13, the others from 18. */
const char *oari_xp_reduce(oari_xp *x, const char *op, const char *in, int n, const int64_t *axes,
                           bool keep, const char *out) {
    Onnx__NodeProto *nd;
    if (!strcmp(op, "ReduceSum") || x->opset >= 18) {
        nd = oari_xp_node1(x, op, 2, (const char *const[]){in, oari_xp_i64(x, n, axes)}, out);
    } else {
        nd = oari_xp_node1(x, op, 1, (const char *const[]){in}, out);
        oari_xp_set_ints(x, nd, "axes", n, axes);
    }
    oari_xp_set_i(x, nd, "keepdims", keep);
    return oari_xp_out0(nd);
}

/* sum, prod, amax, amin: attributes dims bitmask, keepdim. */
int oari_onnx_emit_reduce(oari_xp *x, const oari_xnode *e) {
    int64_t axes[OAR_MAX_DIMS];
    int k = oari_xp_mask_axes(e->a[0], e->rank, axes);
    if (!k)
        OP1("Identity", e->X, e->Y);
    else
        oari_xp_reduce(x, e->row->onnx, e->X, k, axes, e->a[1] != 0, e->Y);
    return x->st;
}

/* The product of some dims of Shape(x), as a float. */
int oari_onnx_emit_size_of(oari_xp *x, const oari_xnode *e) {
    int64_t axes[OAR_MAX_DIMS];
    int k = oari_xp_mask_axes(e->a[0], e->rank, axes);
    const char *dims = OP2("Gather", OP1("Shape", e->X, NULL), oari_xp_i64(x, k, axes), NULL);
    const char *prod = oari_xp_reduce(x, "ReduceProd", dims, 1, (int64_t[]){0}, false, NULL);
    oari_xp_set_i(x, oari_xp_node1(x, "Cast", 1, &prod, e->Y), "to", oari_xp_type(e->ov->dtype));
    return x->st;
}

/* all / any: the row's ReduceMin / ReduceMax of (x != 0) as int32. */
int oari_onnx_emit_all_any(oari_xp *x, const oari_xnode *e) {
    int64_t axes[OAR_MAX_DIMS];
    int k = oari_xp_mask_axes(e->a[0], e->rank, axes);
    const char *b = e->dt == OAR_BOOL
                        ? e->X
                        : OP1("Not", OP2("Equal", e->X, oari_xp_scalar(x, e->dt, 0), NULL), NULL);
    Onnx__NodeProto *nd = oari_xp_node1(x, "Cast", 1, &b, NULL);
    oari_xp_set_i(x, nd, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    const char *r =
        k ? oari_xp_reduce(x, e->row->onnx, oari_xp_out0(nd), k, axes, e->a[1] != 0, NULL)
          : oari_xp_out0(nd);
    oari_xp_set_i(x, oari_xp_node1(x, "Cast", 1, &r, e->Y), "to",
                  ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    return x->st;
}

/* argmax / argmin: attributes dim (-1: the flattened tensor), keepdim. */
int oari_onnx_emit_arg(oari_xp *x, const oari_xnode *e) {
    const char *op = e->row->onnx;
    const int64_t *a = e->a;
    Onnx__NodeProto *nd;
    if (a[0] >= 0) {
        nd = oari_xp_node1(x, op, 1, &e->X, e->Y);
        oari_xp_set_i(x, nd, "axis", a[0]);
        oari_xp_set_i(x, nd, "keepdims", a[1] != 0);
        return x->st;
    }
    const char *flat = OP2("Reshape", e->X, oari_xp_i64(x, 1, (int64_t[]){-1}), NULL);
    nd = oari_xp_node1(x, op, 1, &flat, a[1] ? NULL : e->Y);
    oari_xp_set_i(x, nd, "axis", 0);
    oari_xp_set_i(x, nd, "keepdims", 0);
    if (a[1]) {
        int64_t ones[OAR_MAX_DIMS];
        for (int d = 0; d < e->rank; d++)
            ones[d] = 1;
        OP2("Reshape", oari_xp_out0(nd), oari_xp_i64(x, e->rank, ones), e->Y);
    }
    return x->st;
}

int oari_onnx_emit_cumsum(oari_xp *x, const oari_xnode *e) {
    OP2("CumSum", e->X, oari_xp_i64_scalar(x, e->a[0]), e->Y);
    return x->st;
}

/* softmax / log_softmax over one dim (opset 13 semantics). */
int oari_onnx_emit_softmax(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_i(x, oari_xp_node1(x, e->row->onnx, 1, &e->X, e->Y), "axis", e->rank ? e->a[0] : 0);
    return x->st;
}

/* index_select (Gather) / gather (GatherElements) along attribute 0. */
int oari_onnx_emit_gather(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_i(x, oari_xp_node1(x, e->row->onnx, 2, (const char *const[]){e->X, e->X1}, e->Y),
                  "axis", e->a[0]);
    return x->st;
}

/* scatter / scatter_add: ScatterElements (reduction add for the latter); a
 * 0-d source is expanded to the index's shape. */
int oari_onnx_emit_scatter(oari_xp *x, const oari_xnode *e) {
    const char *upd = e->X2;
    if (x->g->values[e->n->in[2]].ndim == 0)
        upd = OP2("Expand", e->X2, OP1("Shape", e->X1, NULL), NULL);
    Onnx__NodeProto *nd =
        oari_xp_node1(x, "ScatterElements", 3, (const char *const[]){e->X, e->X1, upd}, e->Y);
    oari_xp_set_i(x, nd, "axis", e->a[0]);
    if (e->n->op == OARI_OP_scatter_add) oari_xp_set_s(x, nd, "reduction", "add");
    return x->st;
}

/* ScatterElements(add) with the index spread along dim of the source. */
int oari_onnx_emit_index_add(oari_xp *x, const oari_xnode *e) {
    const oari_gvalue *sv = &x->g->values[e->n->in[2]];
    int64_t ishape[OAR_MAX_DIMS];
    for (int d = 0; d < sv->ndim; d++)
        ishape[d] = d == e->a[0] ? -1 : 1;
    const char *idx = OP2("Reshape", e->X1, oari_xp_i64(x, sv->ndim, ishape), NULL);
    idx = OP2("Expand", idx, OP1("Shape", e->X2, NULL), NULL);
    Onnx__NodeProto *nd =
        oari_xp_node1(x, "ScatterElements", 3, (const char *const[]){e->X, idx, e->X2}, e->Y);
    oari_xp_set_i(x, nd, "axis", e->a[0]);
    oari_xp_set_s(x, nd, "reduction", "add");
    return x->st;
}

int oari_onnx_emit_one_hot(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_i(x,
                  oari_xp_node1(x, "OneHot", 3,
                                (const char *const[]){e->X, oari_xp_i64(x, 1, &e->a[0]),
                                                      oari_xp_i64(x, 2, (int64_t[]){0, 1})},
                                e->Y),
                  "axis", -1);
    return x->st;
}

/* TopK over the whole dim; ties keep the lower index first, as oar's stable sort. */
int oari_onnx_emit_sort(oari_xp *x, const oari_xnode *e) {
    if (!e->rank) return oari_xp_fail(x, "sort of a 0-d tensor");
    int64_t d = e->a[0];
    const oari_gvalue *iv = e->iv;
    const char *k = oari_xp_sizes(x, 1, &iv->shape[d], &iv->sym[d], &iv->smul[d]);
    Onnx__NodeProto *nd = oari_xp_node(x, "TopK", 2, (const char *const[]){e->X, k}, 2,
                                       (const char *const[]){e->Y, x->names[e->n->out[1]]});
    oari_xp_set_i(x, nd, "axis", d);
    oari_xp_set_i(x, nd, "largest", e->a[1] != 0);
    oari_xp_set_i(x, nd, "sorted", 1);
    return x->st;
}

int oari_onnx_emit_topk(oari_xp *x, const oari_xnode *e) {
    Onnx__NodeProto *nd =
        oari_xp_node(x, "TopK", 2, (const char *const[]){e->X, oari_xp_i64(x, 1, &e->a[0])}, 2,
                     (const char *const[]){e->Y, x->names[e->n->out[1]]});
    oari_xp_set_i(x, nd, "axis", e->a[1]);
    oari_xp_set_i(x, nd, "largest", e->a[2] != 0);
    oari_xp_set_i(x, nd, "sorted", 1);
    return x->st;
}

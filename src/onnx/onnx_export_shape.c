/* ONNX export emitters: reshapes and data movement (view, permute, expand,
 * slice, flip, roll, tril/triu, diagonal, concat, pad). Sizes that follow a
 * dynamic dim are written as 0 / -1 / 1 / INT64_MAX where ONNX semantics
 * allow, else read at run time (oari_xp_sizes). */
#define OARI_ONNX_PROTO
#include "onnx_export_internal.h"

/* Slice of one axis: [start, end) by step (end may be INT64_MAX). */
static const char *slice1(oari_xp *x, const char *X, int64_t axis, const char *start,
                          const char *end, int64_t step, const char *out) {
    return oari_xp_out0(oari_xp_node1(
        x, "Slice", 5,
        (const char *const[]){X, start, end, oari_xp_i64(x, 1, &axis), oari_xp_i64(x, 1, &step)},
        out));
}

/* Symbolic dims: 0 copies the input's equal dim, one other may be -1;
 * more need the run-time sizes. */
int oari_onnx_emit_view(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const oari_gvalue *iv = e->iv;
    const int64_t *a = e->a;
    int nt = n->attrs.ni, unresolved = 0;
    int64_t v[OARI_MAX_IATTR];
    bool zero_dim = false;
    for (int k = 0; k < nt; k++) {
        v[k] = a[k];
        zero_dim = zero_dim || (n->isym[k] < 0 && a[k] == 0);
        if (n->isym[k] < 0) continue;
        if (k < e->rank && iv->sym[k] == n->isym[k] && iv->smul[k] == n->imul[k])
            v[k] = 0;
        else
            unresolved++;
    }
    if (zero_dim) { /* a size-0 target dim needs allowzero (opset 14), and then no 0 copies */
        if (x->opset < 14) return oari_xp_fail(x, "a reshape to a size-0 dim needs opset >= 14");
        Onnx__NodeProto *nd = oari_xp_node1(
            x, "Reshape", 2, (const char *const[]){e->X, oari_xp_sizes(x, nt, a, n->isym, n->imul)},
            e->Y);
        oari_xp_set_i(x, nd, "allowzero", 1);
        return x->st;
    }
    const char *shape;
    if (unresolved <= 1) {
        for (int k = 0; k < nt; k++)
            if (n->isym[k] >= 0 && v[k] != 0) v[k] = -1;
        shape = oari_xp_i64(x, nt, v);
    } else {
        shape = oari_xp_sizes(x, nt, a, n->isym, n->imul);
    }
    OP2("Reshape", e->X, shape, e->Y);
    return x->st;
}

int oari_onnx_emit_permute(oari_xp *x, const oari_xnode *e) {
    oari_xp_set_ints(x, oari_xp_node1(x, "Transpose", 1, &e->X, e->Y), "perm", e->rank, e->a);
    return x->st;
}

/* Expand broadcasts both ways: a dim equal to the input's (aligned right)
 * becomes 1 and needs no run-time size. */
int oari_onnx_emit_expand(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const oari_gvalue *iv = e->iv;
    const int64_t *a = e->a;
    int nt = n->attrs.ni, off = nt - e->rank;
    int64_t v[OARI_MAX_IATTR];
    int8_t sy[OARI_MAX_IATTR];
    int32_t mu[OARI_MAX_IATTR];
    for (int k = 0; k < nt; k++) {
        v[k] = a[k], sy[k] = n->isym[k], mu[k] = n->imul[k];
        int d = k - off;
        if (d >= 0 && iv->shape[d] == a[k] && iv->sym[d] == n->isym[k]) v[k] = 1, sy[k] = -1;
    }
    OP2("Expand", e->X, oari_xp_sizes(x, nt, v, sy, mu), e->Y);
    return x->st;
}

/* Attributes dim, start, end, step; an end at a dynamic dim's size is INT64_MAX. */
int oari_onnx_emit_slice(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const int64_t *a = e->a;
    int64_t d = a[0];
    const char *start = oari_xp_sizes(x, 1, &a[1], &n->isym[1], &n->imul[1]);
    const char *end;
    if (a[2] >= e->iv->shape[d] && n->isym[2] == e->iv->sym[d])
        end = oari_xp_i64(x, 1, (int64_t[]){INT64_MAX});
    else
        end = oari_xp_sizes(x, 1, &a[2], &n->isym[2], &n->imul[2]);
    if (n->isym[3] >= 0) return oari_xp_fail(x, "a dynamic step");
    slice1(x, e->X, d, start, end, a[3], e->Y);
    return x->st;
}

int oari_onnx_emit_flip(oari_xp *x, const oari_xnode *e) {
    int64_t axes[OAR_MAX_DIMS], st[OAR_MAX_DIMS], en[OAR_MAX_DIMS], sp[OAR_MAX_DIMS];
    int k = oari_xp_mask_axes(e->a[0], e->rank, axes);
    for (int j = 0; j < k; j++)
        st[j] = -1, en[j] = INT64_MIN, sp[j] = -1;
    if (!k)
        OP1("Identity", e->X, e->Y);
    else
        oari_xp_node1(x, "Slice", 5,
                      (const char *const[]){e->X, oari_xp_i64(x, k, st), oari_xp_i64(x, k, en),
                                            oari_xp_i64(x, k, axes), oari_xp_i64(x, k, sp)},
                      e->Y);
    return x->st;
}

/* Attributes (shift, dim) pairs: per pair the tail and head Slices, concatenated. */
int oari_onnx_emit_roll(oari_xp *x, const oari_xnode *e) {
    const oari_gvalue *iv = e->iv;
    const int64_t *a = e->a;
    const char *cur = e->X;
    int np = e->n->attrs.ni / 2;
    for (int p = 0; p < np; p++) {
        int64_t d = a[2 * p + 1], size = iv->shape[d];
        if (iv->sym[d] >= 0)
            return oari_xp_fail(x, "roll along the dynamic dim %lld", (long long)d);
        int64_t s = size ? ((a[2 * p] % size) + size) % size : 0;
        const char *out = p == np - 1 ? e->Y : NULL;
        if (!s) {
            cur = OP1("Identity", cur, out);
            continue;
        }
        const char *hi = slice1(x, cur, d, oari_xp_i64(x, 1, (int64_t[]){size - s}),
                                oari_xp_i64(x, 1, &size), 1, NULL);
        const char *lo = slice1(x, cur, d, oari_xp_i64(x, 1, (int64_t[]){0}),
                                oari_xp_i64(x, 1, (int64_t[]){size - s}), 1, NULL);
        Onnx__NodeProto *nd = oari_xp_node1(x, "Concat", 2, (const char *const[]){hi, lo}, out);
        oari_xp_set_i(x, nd, "axis", d);
        cur = oari_xp_out0(nd);
    }
    return x->st;
}

/* tril / triu: Trilu (opset 14). */
int oari_onnx_emit_trilu(oari_xp *x, const oari_xnode *e) {
    Onnx__NodeProto *nd = oari_xp_node1(
        x, "Trilu", 2, (const char *const[]){e->X, oari_xp_i64_scalar(x, e->a[0])}, e->Y);
    oari_xp_set_i(x, nd, "upper", e->n->op == OARI_OP_triu);
    return x->st;
}

/* d1, d2 moved last and flattened, the diagonal gathered. */
int oari_onnx_emit_diagonal(oari_xp *x, const oari_xnode *e) {
    const oari_gvalue *iv = e->iv;
    int64_t off = e->a[0], d1 = e->a[1], d2 = e->a[2];
    if (iv->sym[d1] >= 0 || iv->sym[d2] >= 0) return oari_xp_fail(x, "diagonal over a dynamic dim");
    int64_t n1 = iv->shape[d1], n2 = iv->shape[d2], perm[OAR_MAX_DIMS], shape[OAR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < e->rank; d++)
        if (d != d1 && d != d2) shape[k] = 0, perm[k++] = d; /* 0: keep the dim */
    perm[k] = d1, perm[k + 1] = d2, shape[k] = n1 * n2;
    int64_t len = off >= 0 ? (n2 - off < n1 ? n2 - off : n1) : (n1 + off < n2 ? n1 + off : n2);
    if (len < 0) len = 0;
    int64_t *idx = oari_xp_alloc(x, (size_t)(len ? len : 1) * sizeof *idx);
    for (int64_t i = 0; idx && i < len; i++)
        idx[i] = off >= 0 ? i * n2 + i + off : (i - off) * n2 + i;
    Onnx__NodeProto *nd = oari_xp_node1(x, "Transpose", 1, &e->X, NULL);
    oari_xp_set_ints(x, nd, "perm", e->rank, perm);
    const char *flat = OP2("Reshape", oari_xp_out0(nd), oari_xp_i64(x, k + 1, shape), NULL);
    nd = oari_xp_node1(x, "Gather", 2,
                       (const char *const[]){flat, idx ? oari_xp_i64(x, (int)len, idx) : NULL},
                       e->Y);
    oari_xp_set_i(x, nd, "axis", k);
    return x->st;
}

int oari_onnx_emit_concat(oari_xp *x, const oari_xnode *e) {
    const oari_gnode *n = e->n;
    const char *ins[OARI_MAX_IN];
    for (int i = 0; i < n->n_in; i++)
        ins[i] = n->in[i] >= 0 ? x->names[n->in[i]] : NULL;
    oari_xp_set_i(x, oari_xp_node1(x, "Concat", n->n_in, ins, e->Y), "axis", e->a[0]);
    return x->st;
}

/* Attributes mode, then (before, after) per dim from the last; float 0: the value. */
int oari_onnx_emit_pad(oari_xp *x, const oari_xnode *e) {
    static const char *const modes[] = {"constant", "reflect", "edge"};
    const int64_t *a = e->a;
    int rank = e->rank;
    int64_t pads[2 * OAR_MAX_DIMS] = {0};
    for (int k = 0; k < (e->n->attrs.ni - 1) / 2; k++) {
        int d = rank - 1 - k;
        pads[d] = a[1 + 2 * k];
        pads[rank + d] = a[2 + 2 * k];
    }
    const char *ins[3] = {e->X, oari_xp_i64(x, 2 * rank, pads), NULL};
    int nin = 2;
    if (a[0] == 0) ins[nin++] = oari_xp_scalar(x, e->dt, e->f[0]);
    oari_xp_set_s(x, oari_xp_node1(x, "Pad", nin, ins, e->Y), "mode", modes[a[0]]);
    return x->st;
}

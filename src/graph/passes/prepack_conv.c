/* Inference: runs each f32 conv2d whose weight (and bias) are constants on
 * a weight packed once, in the layout oneDNN's convolution asks for:
 *     y = conv2d(x, W, b)  (relu)  ->  y = conv2d_prepacked(x, pack(W), b)
 * (src/ops/defs/conv.def), with a relu that is the conv's only reader
 * folded in as oneDNN's post-op. Per call oneDNN then reorders no weights:
 * ResNet-18's 512 x 512 x 3 x 3 weights (9.4 MB) cost about as much to
 * repack (OpenBLAS's packing, oneDNN's reorder) as to convolve at batch 1.
 * The backend that runs conv2d_prepacked picks the layout and packs
 * (oari_conv_prepack, installed by the CPU backend: this pass names no
 * backend): oneDNN's for the conv at the graph's batch (where the batch is
 * dynamic, the predictor's `batch` setting, else 1: the layouts differ
 * by batch, and ResNet-18 at batch 32 ran 17-22% faster on those picked
 * for 32) and the threads the call will get, or, for the convs conv2d
 * runs by Winograd F(4x4), that algorithm's filter transform (order 2, so
 * it is no longer redone on every call). Convs whose layout is not one the
 * op packs, 1x1 convs on small weights (cpu.md), groups, dynamic channels
 * or planes, and builds without oneDNN (but for the Winograd ones) are
 * left as they are. The values are conv2d's to f32 rounding (oneDNN sums
 * in another order than im2col + gemm). Run by the predictor after its
 * inference passes, like fuse_qlinear; OAR_PREPACK_CONV=0 in the
 * environment turns it off (for A/B measurements). */
#include "../ir.h"

#include <stdlib.h>
#include <string.h>

static bool const_f32(const oar_graph *g, int v) {
    return v >= 0 && g->values[v].kind == OARI_V_CONST && g->values[v].dtype == OAR_F32 &&
           oar_tensor_device(g->values[v].constant) == oar_device_cpu();
}

/* The one live node reading v, when v's only use is there (not a graph
 * output); -1 otherwise. */
static int sole_user(const oar_graph *g, int v, const int *uses) {
    if (uses[v] != 1) return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v) return oari_is_ctrl(n->op) ? -1 : i;
    }
    return -1;
}

/* Packs node i's conv for `batch` where its input's batch is dynamic; 1
 * if it did, 0 if it does not fit, < 0 on failure. */
static int pack_one(oar_graph *g, int i, const int *uses, int64_t batch) {
    oari_gnode *cv = &g->nodes[i];
    if (cv->n_in != 3 || cv->attrs.ni != 7 || cv->attrs.i[6] != 1) return 0;
    for (int k = 0; k < cv->attrs.ni; k++)
        if (cv->isym[k] >= 0) return 0;
    int xv = cv->in[0], wv = cv->in[1], bv = cv->in[2], yv = cv->out[0];
    const oari_gvalue *x = &g->values[xv], *w = &g->values[wv];
    if (x->dtype != OAR_F32 || x->ndim != 4 || !const_f32(g, wv) || w->ndim != 4 ||
        (bv >= 0 && (!const_f32(g, bv) || g->values[bv].ndim != 1)))
        return 0;
    for (int d = 1; d < 4; d++)
        if (x->sym[d] >= 0) return 0;
    const int64_t *ia = cv->attrs.i;
    int ir = sole_user(g, yv, uses);
    if (ir >= 0 && (g->nodes[ir].op != OARI_OP_relu || g->nodes[ir].n_in != 1)) ir = -1;
    int64_t a[14] = {ia[0], ia[1], ia[2], ia[3], ia[4], ia[5], w->shape[0], w->shape[1], w->shape[2], w->shape[3],
                     0, 0, 0, ir >= 0};
    if (!oari_conv_prepack.layout(a, x->sym[0] >= 0 ? batch : x->shape[0], x->shape[2], x->shape[3], bv >= 0))
        return 0;
    int64_t d[6];
    oar_pool *pool = oar_pool_push();
    if (!pool) return oari_fail_status();
    oari_conv2d_packed_shape(a, d);
    oar_tensor *wc = oar_contiguous(g->values[wv].constant);
    oar_tensor *wp = wc ? oar_empty(OAR_F32, 6, d, NULL) : NULL;
    char name[256];
    snprintf(name, sizeof name, "%s.packed", g->values[wv].name ? g->values[wv].name : "conv");
    if (wp) oari_conv_prepack.pack(oar_tensor_data(wc), oar_tensor_data(wp), a);
    int pv = wp ? oari_graph_add_const(g, wp, name) : -1;
    oar_pool_pop(pool);
    if (pv < 0) return oari_fail_status();
    cv = &g->nodes[i]; /* (adding a value moves no node, but read it again) */
    cv->op = OARI_OP_conv2d_prepacked;
    cv->in[1] = pv;
    cv->attrs = oari_attrs_ints(14, a);
    for (int k = 0; k < OARI_MAX_IATTR; k++) cv->isym[k] = -1, cv->imul[k] = 1;
    if (ir >= 0) {
        int r = g->nodes[ir].out[0];
        oari_graph_replace_uses(g, r, yv);
        oari_graph_kill(g, ir);
    }
    return 1;
}

int oari_pass_prepack_conv(oar_graph *g) { return oari_pass_prepack_conv_at(g, 1); }

int oari_pass_prepack_conv_at(oar_graph *g, int64_t batch) {
    if (batch < 1) return oari_error(OAR_ERR_INVALID, "prepack_conv: batch %lld (want >= 1)", (long long)batch);
    const char *env = getenv("OAR_PREPACK_CONV");
    if ((env && !strcmp(env, "0")) || !oari_conv_prepack.layout || !oari_conv_prepack.pack) return 0;
    int changes = 0, st = 0;
    size_t nbytes = 0;
    int *uses = NULL;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        if (g->nodes[i].dead || g->nodes[i].op != OARI_OP_conv2d) continue;
        if ((size_t)(g->n_values + 1) * sizeof(int) != nbytes) {
            if (uses) oari_free(uses, nbytes);
            nbytes = (size_t)(g->n_values + 1) * sizeof(int);
            if (!(uses = oari_malloc(nbytes))) return oari_fail_status();
        }
        oari_graph_use_counts(g, uses);
        st = pack_one(g, i, uses, batch);
        if (st > 0) changes++, st = 0;
    }
    if (uses) oari_free(uses, nbytes);
    if (st) return st;
    int cst = changes ? oari_graph_compact(g) : 0;
    return cst ? cst : changes;
}

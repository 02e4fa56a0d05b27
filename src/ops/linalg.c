/* Linear algebra: the matmul primitive (shape rule with torch.matmul's 1-D
 * and broadcasting semantics, gradient rule) and the composites bmm, outer,
 * dot and einsum. Kernels: src/backends/cpu/cpu_linalg.c. */
#include "op.h"

#include <oar/dist.h>

#include <string.h>

/* ---- matmul: shape rule ---------------------------------------------------- */

static int infer_matmul(oari_infer *c) {
    const oar_tensor *a = c->in[0], *b = c->in[1];
    char sa[200], sb[200];
    if (a->ndim < 1 || b->ndim < 1)
        return oari_error(OAR_ERR_INVALID, "matmul: both arguments need at least 1 dimension, "
                          "got shapes %s and %s", oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape));
    bool a1 = a->ndim == 1, b1 = b->ndim == 1;
    int64_t ka = a->shape[a->ndim - 1], kb = b1 ? b->shape[0] : b->shape[b->ndim - 2];
    char za[64], zb[64];
    if (ka != kb)
        return oari_error(OAR_ERR_INVALID, "matmul: cannot multiply shapes %s and %s (%s != %s "
                          "in the contracted dim)", oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape), oari_size_str(za, ka), oari_size_str(zb, kb));
    int na = a1 ? 0 : a->ndim - 2, nb = b1 ? 0 : b->ndim - 2;
    int64_t batch[OAR_MAX_DIMS];
    int nbatch = 0;
    if (na || nb) {
        nbatch = oari_broadcast_shapes("matmul", na, a->shape, nb, b->shape, batch);
        if (nbatch < 0) {
            return oari_error(OAR_ERR_INVALID, "matmul: batch dims of shapes %s and %s do not "
                              "broadcast", oari_shape_str(sa, a->ndim, a->shape),
                              oari_shape_str(sb, b->ndim, b->shape));
        }
    }
    int nd = nbatch + !a1 + !b1;
    if (nd > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID,
                          "matmul: result of shapes %s and %s has more than %d dims",
                          oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape), OAR_MAX_DIMS);
    oar_dtype d = oari_result_type(2, c->in);
    if (d == OAR_BOOL)
        return oari_error(OAR_ERR_INVALID, "matmul: not defined for bool inputs; cast them first");
    oari_meta *o = &c->out[0];
    o->dtype = d;
    o->ndim = nd;
    memcpy(o->shape, batch, (size_t)nbatch * sizeof *batch);
    if (!a1) o->shape[nbatch] = a->shape[a->ndim - 2];
    if (!b1) o->shape[nd - 1] = b->shape[b->ndim - 1];
    c->in_dtype[0] = c->in_dtype[1] = d;
    c->kernel_dtype = d;
    return 0;
}

/* ---- matmul: gradient rule ------------------------------------------------- */

/* x with its last two dims swapped. */
static oar_tensor *mT(oar_tensor *x) { return oar_transpose(x, -2, -1); }
/* conj for complex x; x itself otherwise (oar_conj would copy a real x). */
static oar_tensor *cj(oar_tensor *x) { return x && oar_dtype_is_complex(x->dtype) ? oar_conj(x) : x; }

/* A 2-D matrix stored transposed, as a linear layer's W^T is (on a
 * distributed tensor: its local shard): its gradient is computed as the
 * transpose of a contiguous product, so the transpose's backward gives W a
 * contiguous gradient instead of copying one (PyTorch's mm_mat2_backward
 * does the same). */
static bool stored_transposed(oar_tensor *t) {
    if (t->ext[OARI_EXT_DIST]) t = oari_hooks.dist_local ? oari_hooks.dist_local(t) : NULL;
    return t && t->ndim == 2 && t->shape[0] > 1 && t->shape[1] > 1 && t->strides[0] == 1 &&
           t->strides[1] == t->shape[0];
}

static int grad_matmul(oari_grad_ctx *g) {
    /* gA = gout @ B^H, gB = A^H @ gout, summed over broadcast batch dims;
     * 1-D operands were promoted ([k] -> [1, k] for A, [k, 1] for B). */
    oar_tensor *go = g->gout[0], *a = g->in[0], *b = g->in[1];
    const oari_meta *ma = &g->in_meta[0], *mb = &g->in_meta[1];
    if (!go) return 0;
    bool a1 = ma->ndim == 1, b1 = mb->ndim == 1;
    if (a1 && b1) { /* dot: go is 0-d */
        if (g->needs[0] && !(g->gin[0] = oari_sum_to(oar_mul(go, cj(b)), ma)))
            return oari_fail_status();
        if (g->needs[1] && !(g->gin[1] = oari_sum_to(oar_mul(go, cj(a)), mb)))
            return oari_fail_status();
        return 0;
    }
    oar_tensor *g2 = go;
    if (a1) g2 = oar_unsqueeze(g2, go->ndim - 1);      /* [..., m] -> [..., 1, m] */
    if (b1) g2 = oar_unsqueeze(g2, go->ndim);          /* [..., n] -> [..., n, 1] */
    if (g->needs[0] && ma->ndim == 2 && mb->ndim == 2 && stored_transposed(a)) {
        if (!(g->gin[0] = mT(oar_matmul(cj(b), mT(g2))))) return oari_fail_status(); /* (B^H^T gout^T)^T */
    } else if (g->needs[0]) {
        oar_tensor *b2 = b1 ? oar_unsqueeze(b, 1) : b; /* [k, 1] */
        oar_tensor *ga = oar_matmul(g2, mT(cj(b2))); /* [..., n, k] */
        if (a1 && ga) ga = oar_squeeze(ga, ga->ndim - 2);
        if (!(g->gin[0] = oari_sum_to(ga, ma))) return oari_fail_status();
    }
    if (g->needs[1] && mb->ndim == 2 && ma->ndim > 2) {
        /* a 2-D B under batched A (a linear layer on [batch, seq, k]): one
         * GEMM over the folded batch, A^H [k, batch*n] @ gout [batch*n, m],
         * not a GEMM per batch entry and a sum of their [batch, k, m]
         * (on distributed tensors the view rule keeps a batch shard
         * through the merge: src/dist/rules.c, merges_to) */
        int64_t k = ma->shape[ma->ndim - 1], m = mb->shape[1];
        oar_tensor *af = oar_reshape(cj(a), 2, (int64_t[]){-1, k});
        oar_tensor *gf = oar_reshape(g2, 2, (int64_t[]){-1, m});
        g->gin[1] = stored_transposed(b) ? mT(oar_matmul(mT(gf), af)) : oar_matmul(mT(af), gf);
        if (!g->gin[1]) return oari_fail_status();
    } else if (g->needs[1] && ma->ndim == 2 && mb->ndim == 2 && stored_transposed(b)) {
        if (!(g->gin[1] = mT(oar_matmul(mT(g2), cj(a))))) return oari_fail_status(); /* (gout^T A^H^T)^T */
    } else if (g->needs[1]) {
        oar_tensor *a2 = a1 ? oar_unsqueeze(a, 0) : a; /* [1, k] */
        oar_tensor *gb = oar_matmul(mT(cj(a2)), g2); /* [..., k, m] */
        if (b1 && gb) gb = oar_squeeze(gb, gb->ndim - 1);
        if (!(g->gin[1] = oari_sum_to(gb, mb))) return oari_fail_status();
    }
    return 0;
}

const oari_op_def oari_def_matmul = {
    .name = "matmul", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_OPAQUE,
    .saved = OARI_SAVE_IN(0) | OARI_SAVE_IN(1), .infer = infer_matmul, .grad = grad_matmul,
};

/* ---- add_scaled: dst += alpha * src in place -------------------------------- */

static int infer_add_scaled(oari_infer *c) {
    const oar_tensor *dst = c->in[0], *src = c->in[1];
    char a[200], b[200];
    if (!oar_dtype_is_float(dst->dtype) && !oar_dtype_is_complex(dst->dtype))
        return oari_error(OAR_ERR_INVALID, "add_scaled_: destination must be a float or complex "
                          "tensor, got %s", oar_dtype_name(dst->dtype));
    if (oar_dtype_is_complex(src->dtype) && !oar_dtype_is_complex(dst->dtype))
        return oari_error(OAR_ERR_INVALID, "add_scaled_: cannot add a complex source (%s) into a "
                          "real destination (%s)", oar_dtype_name(src->dtype),
                          oar_dtype_name(dst->dtype));
    int64_t shape[OAR_MAX_DIMS];
    int nd = oari_broadcast_shapes("add_scaled_", dst->ndim, dst->shape, src->ndim, src->shape, shape);
    if (nd < 0) return OAR_ERR_INVALID;
    if (nd != dst->ndim || memcmp(shape, dst->shape, (size_t)nd * sizeof *shape))
        return oari_error(OAR_ERR_INVALID, "add_scaled_: source of shape %s does not broadcast to "
                          "the destination's shape %s", oari_shape_str(a, src->ndim, src->shape),
                          oari_shape_str(b, dst->ndim, dst->shape));
    oari_meta_from(&c->out[0], dst);
    c->in_dtype[1] = dst->dtype;
    c->kernel_dtype = dst->dtype;
    return 0;
}

const oari_op_def oari_def_add_scaled = {
    .name = "add_scaled", .n_in = 2, .n_out = 1, .fusion = OARI_FUSE_BROADCAST,
    .flags = OARI_F_INPLACE | OARI_F_BROADCAST | OARI_F_NONDIFF, .infer = infer_add_scaled,
};

/* ---- public functions ------------------------------------------------------ */

static bool null_input(const char *op, oar_tensor *a, oar_tensor *b) {
    if (a && b) return false;
    if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "%s: input %d is NULL", op, a ? 1 : 0);
    return true;
}

oar_tensor *oar_matmul(oar_tensor *a, oar_tensor *b) {
    return oari_call2(OARI_OP_matmul, a, b, NULL);
}

oar_tensor *oar_bmm(oar_tensor *a, oar_tensor *b) {
    if (null_input("bmm", a, b)) return NULL;
    char sa[200], sb[200];
    if (a->ndim != 3 || b->ndim != 3 || a->shape[0] != b->shape[0])
        return oari_error(OAR_ERR_INVALID, "bmm: expected [B, n, k] and [B, k, m] with the same B, "
                          "got shapes %s and %s", oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape)), NULL;
    return oar_matmul(a, b);
}

oar_tensor *oar_dot(oar_tensor *a, oar_tensor *b) {
    if (null_input("dot", a, b)) return NULL;
    char sa[200], sb[200];
    if (a->ndim != 1 || b->ndim != 1 || a->shape[0] != b->shape[0])
        return oari_error(OAR_ERR_INVALID,
                          "dot: expected two 1-D tensors of one length, got shapes "
                          "%s and %s",
                          oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape)),
               NULL;
    return oar_matmul(a, b);
}

oar_tensor *oar_outer(oar_tensor *a, oar_tensor *b) {
    if (null_input("outer", a, b)) return NULL;
    char sa[200], sb[200];
    if (a->ndim != 1 || b->ndim != 1)
        return oari_error(OAR_ERR_INVALID, "outer: expected two 1-D tensors, got shapes %s and %s",
                          oari_shape_str(sa, a->ndim, a->shape),
                          oari_shape_str(sb, b->ndim, b->shape)), NULL;
    oar_pool *p = oar_pool_push();
    oar_tensor *r = oar_matmul(oar_unsqueeze(a, 1), oar_unsqueeze(b, 0));
    return oari_pool_return(p, r);
}

/* ---- einsum ----------------------------------------------------------------
 * Labels: 'A'-'Z' -> 0-25, 'a'-'z' -> 26-51 (ASCII order, the order of an
 * implicit output), ellipsis dims -> 52 + j, j counted from the right. */

#define EIN_LETTERS 52
#define EIN_LABELS (EIN_LETTERS + OAR_MAX_DIMS)
#define EIN_MAX_OPS 16

typedef struct {
    oar_tensor *t;
    int nd;
    int lab[OAR_MAX_DIMS];
} ein_term;

static int ein_label(char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
    return -1;
}

/* Parses one subscript term into labels. Returns the number of letters (or
 * -1), sets *ell to the letter position of "..." or -1. */
static int ein_parse_term(const char *eq, const char *s, const char *end, int *labs, int *ell) {
    int n = 0;
    *ell = -1;
    for (const char *c = s; c < end; c++) {
        if (*c == '.') {
            if (end - c < 3 || c[1] != '.' || c[2] != '.' || *ell >= 0) {
                oari_error(OAR_ERR_INVALID, "einsum: invalid ellipsis in equation \"%s\"", eq);
                return -1;
            }
            *ell = n;
            c += 2;
            continue;
        }
        int l = ein_label(*c);
        if (l < 0) {
            oari_error(OAR_ERR_INVALID, "einsum: invalid character '%c' in equation \"%s\"", *c,
                       eq);
            return -1;
        }
        if (n >= OAR_MAX_DIMS) {
            oari_error(OAR_ERR_INVALID, "einsum: too many subscripts in equation \"%s\"", eq);
            return -1;
        }
        labs[n++] = l;
    }
    return n;
}

static char ein_char(int l) {
    return l < 26 ? (char)('A' + l) : l < EIN_LETTERS ? (char)('a' + l - 26) : '.';
}

static int ein_find(const ein_term *t, int label) {
    for (int i = 0; i < t->nd; i++)
        if (t->lab[i] == label) return i;
    return -1;
}

/* Sums out the dims of t whose keep[label] is false. */
static int ein_sum_unneeded(ein_term *t, const bool *keep) {
    int64_t dims[OAR_MAX_DIMS];
    int n = 0, k = 0;
    for (int i = 0; i < t->nd; i++) {
        if (keep[t->lab[i]]) t->lab[k++] = t->lab[i];
        else dims[n++] = i;
    }
    if (!n) return 0;
    t->t = oar_sum(t->t, n, dims, false);
    t->nd = k;
    return t->t ? 0 : OAR_ERR_INVALID;
}

/* Permutes t so that its labels follow `order` (a permutation of them). */
static int ein_permute(ein_term *t, const int *order) {
    int64_t perm[OAR_MAX_DIMS];
    bool identity = true;
    for (int i = 0; i < t->nd; i++) {
        perm[i] = ein_find(t, order[i]);
        identity = identity && perm[i] == i;
    }
    if (!identity) t->t = oar_permute(t->t, perm);
    memcpy(t->lab, order, (size_t)t->nd * sizeof *order);
    return t->t ? 0 : OAR_ERR_INVALID;
}

/* Expands t's size-1 dims to the label sizes. */
static int ein_expand(ein_term *t, const int64_t *size) {
    int64_t shape[OAR_MAX_DIMS];
    bool need = false;
    for (int i = 0; i < t->nd; i++) {
        shape[i] = size[t->lab[i]];
        need = need || shape[i] != t->t->shape[i];
    }
    if (need) t->t = oar_expand(t->t, t->nd, shape);
    return t->t ? 0 : OAR_ERR_INVALID;
}

/* a <- contraction of a and b keeping the labels in `keep`, through one
 * batched matmul [B, LO, K] x [B, K, RO]. */
static int ein_contract(ein_term *a, ein_term *b, const bool *keep, const int64_t *size) {
    bool in_a[EIN_LABELS] = {0}, in_b[EIN_LABELS] = {0};
    for (int i = 0; i < a->nd; i++) in_a[a->lab[i]] = true;
    for (int i = 0; i < b->nd; i++) in_b[b->lab[i]] = true;
    bool keep_a[EIN_LABELS], keep_b[EIN_LABELS];
    for (int l = 0; l < EIN_LABELS; l++) {
        keep_a[l] = keep[l] || in_b[l];
        keep_b[l] = keep[l] || in_a[l];
    }
    if (ein_sum_unneeded(a, keep_a) || ein_sum_unneeded(b, keep_b)) return OAR_ERR_INVALID;
    if (ein_expand(a, size) || ein_expand(b, size)) return OAR_ERR_INVALID;
    int batch[OAR_MAX_DIMS], lo[OAR_MAX_DIMS], ro[OAR_MAX_DIMS], con[OAR_MAX_DIMS];
    int nbat = 0, nlo = 0, nro = 0, ncon = 0;
    int64_t sbat = 1, slo = 1, sro = 1, scon = 1;
    for (int i = 0; i < a->nd; i++) {
        int l = a->lab[i];
        if (ein_find(b, l) >= 0) {
            if (keep[l]) batch[nbat++] = l, sbat *= size[l];
            else con[ncon++] = l, scon *= size[l];
        } else {
            lo[nlo++] = l, slo *= size[l];
        }
    }
    for (int i = 0; i < b->nd; i++)
        if (ein_find(a, b->lab[i]) < 0) ro[nro++] = b->lab[i], sro *= size[b->lab[i]];
    if (nbat + nlo + nro > OAR_MAX_DIMS)
        return oari_error(OAR_ERR_INVALID, "einsum: an intermediate result has more than %d dims",
                          OAR_MAX_DIMS);
    int order_a[OAR_MAX_DIMS], order_b[OAR_MAX_DIMS], n = 0;
    for (int i = 0; i < nbat; i++) order_a[n++] = batch[i];
    for (int i = 0; i < nlo; i++) order_a[n++] = lo[i];
    for (int i = 0; i < ncon; i++) order_a[n++] = con[i];
    n = 0;
    for (int i = 0; i < nbat; i++) order_b[n++] = batch[i];
    for (int i = 0; i < ncon; i++) order_b[n++] = con[i];
    for (int i = 0; i < nro; i++) order_b[n++] = ro[i];
    if (ein_permute(a, order_a) || ein_permute(b, order_b)) return OAR_ERR_INVALID;
    int64_t sa[3] = {sbat, slo, scon}, sb[3] = {sbat, scon, sro};
    oar_tensor *r = oar_matmul(oar_reshape(a->t, 3, sa), oar_reshape(b->t, 3, sb));
    int64_t shape[OAR_MAX_DIMS];
    n = 0;
    for (int i = 0; i < nbat; i++) a->lab[n] = batch[i], shape[n++] = size[batch[i]];
    for (int i = 0; i < nlo; i++) a->lab[n] = lo[i], shape[n++] = size[lo[i]];
    for (int i = 0; i < nro; i++) a->lab[n] = ro[i], shape[n++] = size[ro[i]];
    a->nd = n;
    a->t = oar_reshape(r, n, shape);
    return a->t ? 0 : OAR_ERR_INVALID;
}

/* Takes the diagonal of every label repeated within a term ("ii->i"). */
static int ein_diagonals(const char *eq, ein_term *t) {
    for (;;) {
        int p = -1, q = -1;
        for (int i = 0; i < t->nd && p < 0; i++)
            for (int j = i + 1; j < t->nd; j++)
                if (t->lab[i] == t->lab[j]) {
                    p = i, q = j;
                    break;
                }
        if (p < 0) return 0;
        if (t->t->shape[p] != t->t->shape[q])
            return oari_error(OAR_ERR_INVALID, "einsum: repeated subscript in \"%s\" over dims of "
                              "sizes %lld and %lld", eq, (long long)t->t->shape[p],
                              (long long)t->t->shape[q]);
        int l = t->lab[p], k = 0;
        t->t = oar_diagonal(t->t, 0, p, q);
        if (!t->t) return OAR_ERR_INVALID;
        for (int i = 0; i < t->nd; i++)
            if (i != p && i != q) t->lab[k++] = t->lab[i];
        t->lab[k++] = l;
        t->nd = k;
    }
}

static oar_tensor *einsum_impl(const char *eq, int n, oar_tensor *const *xs) {
    char buf[512];
    size_t len = 0;
    for (const char *c = eq; *c; c++) {
        if (*c == ' ') continue;
        if (len + 1 >= sizeof buf)
            return oari_error(OAR_ERR_INVALID, "einsum: equation is too long"), NULL;
        buf[len++] = *c;
    }
    buf[len] = 0;
    const char *arrow = strstr(buf, "->");
    const char *lhs_end = arrow ? arrow : buf + len;
    ein_term t[EIN_MAX_OPS];
    int64_t size[EIN_LABELS];
    int count[EIN_LABELS] = {0};
    for (int l = 0; l < EIN_LABELS; l++) size[l] = -1;
    int max_ell = 0;
    const char *s = buf;
    for (int i = 0; i < n; i++) {
        const char *e = memchr(s, ',', (size_t)(lhs_end - s));
        if (!e) e = lhs_end;
        if (i < n - 1 && e == lhs_end)
            return oari_error(OAR_ERR_INVALID,
                              "einsum: equation \"%s\" has fewer terms than the %d "
                              "operands",
                              eq, n),
                   NULL;
        int labs[OAR_MAX_DIMS], ell;
        int nl = ein_parse_term(eq, s, e, labs, &ell);
        if (nl < 0) return NULL;
        oar_tensor *x = xs[i];
        int nd = x->ndim;
        if (ell < 0 ? nl != nd : nl > nd) {
            char sh[200];
            return oari_error(OAR_ERR_INVALID,
                              "einsum: term %d of \"%s\" has %d subscripts for an "
                              "operand of shape %s",
                              i, eq, nl, oari_shape_str(sh, nd, x->shape)),
                   NULL;
        }
        int ne = ell < 0 ? 0 : nd - nl;
        t[i].t = x;
        t[i].nd = nd;
        for (int d = 0, j = 0; d < nd; d++) {
            if (ell >= 0 && d >= ell && d < ell + ne)
                t[i].lab[d] = EIN_LETTERS + (ell + ne - 1 - d);
            else t[i].lab[d] = labs[j++];
        }
        if (ne > max_ell) max_ell = ne;
        bool seen[EIN_LABELS] = {0};
        for (int d = 0; d < nd; d++) {
            int l = t[i].lab[d];
            int64_t sz = x->shape[d];
            if (!seen[l]) count[l]++;
            seen[l] = true;
            if (size[l] < 0 || size[l] == 1) size[l] = sz;
            else if (sz != 1 && sz != size[l])
                return oari_error(OAR_ERR_INVALID,
                                  "einsum: subscript %c of \"%s\" has sizes %lld and "
                                  "%lld that do not broadcast",
                                  ein_char(l), eq, (long long)size[l], (long long)sz),
                       NULL;
        }
        s = e + 1;
    }
    if (s < lhs_end)
        return oari_error(OAR_ERR_INVALID, "einsum: equation \"%s\" has more terms than the %d "
                          "operands", eq, n), NULL;

    /* the output labels */
    int out[OAR_MAX_DIMS], nout = 0;
    bool keep[EIN_LABELS] = {0};
    if (arrow) {
        int labs[OAR_MAX_DIMS], ell;
        int nl = ein_parse_term(eq, arrow + 2, buf + len, labs, &ell);
        if (nl < 0) return NULL;
        if (nl + (ell >= 0 ? max_ell : 0) > OAR_MAX_DIMS)
            return oari_error(OAR_ERR_INVALID, "einsum: output of \"%s\" has too many dims", eq),
                   NULL;
        for (int j = 0; j <= nl; j++) {
            if (j == ell)
                for (int e = max_ell - 1; e >= 0; e--) out[nout++] = EIN_LETTERS + e;
            if (j == nl) break;
            int l = labs[j];
            if (!count[l])
                return oari_error(OAR_ERR_INVALID,
                                  "einsum: output subscript %c of \"%s\" appears in "
                                  "no input",
                                  ein_char(l), eq),
                       NULL;
            if (keep[l])
                return oari_error(OAR_ERR_INVALID,
                                  "einsum: output subscript %c of \"%s\" is repeated", ein_char(l),
                                  eq),
                       NULL;
            keep[l] = true;
            out[nout++] = l;
        }
        for (int e = 0; e < max_ell && ell >= 0; e++) keep[EIN_LETTERS + e] = true;
    } else {
        for (int e = max_ell - 1; e >= 0; e--) out[nout++] = EIN_LETTERS + e;
        for (int l = 0; l < EIN_LETTERS; l++)
            if (count[l] == 1) out[nout++] = l;
        if (nout > OAR_MAX_DIMS)
            return oari_error(OAR_ERR_INVALID, "einsum: output of \"%s\" has too many dims", eq),
                   NULL;
        for (int j = 0; j < nout; j++) keep[out[j]] = true;
    }

    /* diagonals, then sum out labels no other term or the output needs */
    for (int i = 0; i < n; i++) {
        if (ein_diagonals(eq, &t[i])) return NULL;
        bool need[EIN_LABELS];
        for (int l = 0; l < EIN_LABELS; l++) need[l] = keep[l];
        for (int j = 0; j < n; j++)
            for (int d = 0; d < t[j].nd && j != i; d++) need[t[j].lab[d]] = true;
        if (ein_sum_unneeded(&t[i], need)) return NULL;
    }
    /* contract left to right */
    for (int i = 1; i < n; i++) {
        bool need[EIN_LABELS];
        for (int l = 0; l < EIN_LABELS; l++) need[l] = keep[l];
        for (int j = i + 1; j < n; j++)
            for (int d = 0; d < t[j].nd; d++) need[t[j].lab[d]] = true;
        if (ein_contract(&t[0], &t[i], need, size)) return NULL;
    }
    if (ein_sum_unneeded(&t[0], keep)) return NULL;
    if (t[0].nd != nout)
        return oari_error(OAR_ERR_INVALID, "einsum: internal label mismatch"), NULL;
    if (ein_permute(&t[0], out)) return NULL;
    return t[0].t;
}

oar_tensor *oar_einsum(const char *equation, int n, oar_tensor *const *xs) {
    if (!equation) return oari_error(OAR_ERR_INVALID, "einsum: equation is NULL"), NULL;
    if (n < 1 || n > EIN_MAX_OPS || !xs)
        return oari_error(OAR_ERR_INVALID, "einsum: expected 1 to %d operands, got %d", EIN_MAX_OPS,
                          n), NULL;
    for (int i = 0; i < n; i++) {
        if (xs[i]) continue;
        if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "einsum: operand %d is NULL", i);
        return NULL;
    }
    oar_pool *p = oar_pool_push();
    oar_tensor *r = einsum_impl(equation, n, xs);
    return oari_pool_return(p, r);
}

int oar_add_scaled_(oar_tensor *dst, oar_tensor *src, double alpha) {
    oar_tensor *in[2] = {dst, src}, *r = NULL;
    oari_attrs a = {.nf = 1, .f = {alpha}};
    int st = oari_dispatch(OARI_OP_add_scaled, 2, in, &a, &r);
    oar_tensor_release(r);
    return st;
}

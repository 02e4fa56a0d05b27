/* CPU loops for the cuda plugin's layer_norm, group/batch norm, pool and indexing launchers
 * (plugins/cuda/cuda_kernels.h), for the tests that run the plugin's host
 * code without a GPU (plugins/fake_cuda_plugin.c, test_cuda_plugin_host.c).
 * They follow what cuda_kernels.cu's kernels compute, in double; the
 * includer defines at_of (an element's offset in a view) and FAKE_LD(p,
 * dt, i) / FAKE_ST(p, dt, i, v) (element i of p in oar's dtype dt). */
#ifndef OAR_FAKE_CUDA_NN_H
#define OAR_FAKE_CUDA_NN_H

int oar_cuda_layer_norm(void *y, oar_cuda_desc ty, void *mean, oar_cuda_desc tm, void *rstd, oar_cuda_desc tr,
                        int32_t dt, const void *x, oar_cuda_desc tx, const void *w, oar_cuda_desc tw, const void *b,
                        oar_cuda_desc tb, double eps, int64_t d, int64_t rows, void *stream) {
    (void)stream;
    if (dt != 6 && dt != 7) return (int)cudaErrorInvalidValue;
    for (int64_t r = 0; r < rows; r++) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mu += FAKE_LD(x, dt, at_of(&tx, r * d + j));
        mu /= (double)d;
        for (int64_t j = 0; j < d; j++) {
            double c = FAKE_LD(x, dt, at_of(&tx, r * d + j)) - mu;
            var += c * c;
        }
        double rs = 1 / sqrt(var / (double)d + eps);
        FAKE_ST(mean, dt, at_of(&tm, r), mu);
        FAKE_ST(rstd, dt, at_of(&tr, r), rs);
        for (int64_t j = 0; j < d; j++) {
            double v = (FAKE_LD(x, dt, at_of(&tx, r * d + j)) - mu) * rs;
            if (w) v *= FAKE_LD(w, dt, at_of(&tw, j));
            if (b) v += FAKE_LD(b, dt, at_of(&tb, j));
            FAKE_ST(y, dt, at_of(&ty, r * d + j), v);
        }
    }
    return 0;
}

/* group_norm and batch_norm as cuda_kernels.cu's k_channel_norm computes them */
int oar_cuda_channel_norm(const oar_cuda_norm_args *a, int32_t dt, void *stream) {
    (void)stream;
    if ((dt != 6 && dt != 7) || a->mode < 0 || a->mode > 2 || a->s < 1 || a->groups < 1 || a->c % a->groups)
        return (int)cudaErrorInvalidValue;
    const int64_t n_groups = a->mode == 0 ? a->n * a->groups : a->c, cg = a->c / a->groups;
    const int64_t cnt = a->mode == 0 ? cg * a->s : a->n * a->s;
    for (int64_t g = 0; g < n_groups; g++) {
        double mu, var;
#define FAKE_MEMBER(k, ch)                                                                                  \
    (a->mode == 0 ? ((g / a->groups) * a->c + (ch = (g % a->groups) * cg + (k) / a->s)) * a->s + (k) % a->s \
                  : (((k) / a->s) * a->c + (ch = g)) * a->s + (k) % a->s)
        int64_t ch = 0;
        if (a->mode == 2) {
            mu = FAKE_LD(a->rm, dt, at_of(&a->trm, g)), var = FAKE_LD(a->rv, dt, at_of(&a->trv, g));
        } else {
            double s = 0, sq = 0;
            for (int64_t k = 0; k < cnt; k++) s += FAKE_LD(a->x, dt, at_of(&a->tx, FAKE_MEMBER(k, ch)));
            mu = s / (double)(cnt > 0 ? cnt : 1);
            for (int64_t k = 0; k < cnt; k++) {
                double d = FAKE_LD(a->x, dt, at_of(&a->tx, FAKE_MEMBER(k, ch))) - mu;
                sq += d * d;
            }
            var = cnt > 0 ? sq / (double)cnt : 0;
            if (a->mode == 1) FAKE_ST(a->uvar, dt, at_of(&a->tu, g), cnt > 1 ? sq / (double)(cnt - 1) : var);
        }
        double rs = 1 / sqrt(var + a->eps);
        FAKE_ST(a->mean, dt, at_of(&a->tm, g), mu);
        FAKE_ST(a->rstd, dt, at_of(&a->tr, g), rs);
        if (a->mode == 2) FAKE_ST(a->uvar, dt, at_of(&a->tu, g), FAKE_LD(a->rv, dt, at_of(&a->trv, g)));
        for (int64_t k = 0; k < cnt; k++) {
            int64_t i = FAKE_MEMBER(k, ch);
            double wc = a->w ? FAKE_LD(a->w, dt, at_of(&a->tw, ch)) : 1, bc = a->b ? FAKE_LD(a->b, dt, at_of(&a->tb, ch)) : 0;
            FAKE_ST(a->y, dt, at_of(&a->ty, i), (FAKE_LD(a->x, dt, at_of(&a->tx, i)) - mu) * rs * wc + bc);
        }
#undef FAKE_MEMBER
    }
    return 0;
}

static int64_t fake_avg_window(const int64_t *a, int64_t H, int64_t W, int64_t oy, int64_t ox, int64_t *y0,
                               int64_t *y1, int64_t *x0, int64_t *x1) {
    int64_t h0 = oy * a[2] - a[4], w0 = ox * a[3] - a[5], h1 = h0 + a[0], w1 = w0 + a[1];
    if (h1 > H + a[4]) h1 = H + a[4];
    if (w1 > W + a[5]) w1 = W + a[5];
    int64_t pool = (h1 - h0) * (w1 - w0);
    *y0 = h0 < 0 ? 0 : h0, *x0 = w0 < 0 ? 0 : w0, *y1 = h1 > H ? H : h1, *x1 = w1 > W ? W : w1;
    if (*y0 >= *y1 || *x0 >= *x1) return 0;
    return a[7] ? pool : (*y1 - *y0) * (*x1 - *x0);
}

int oar_cuda_pool(int op, int32_t dt, void *o, oar_cuda_desc to, void *o2, oar_cuda_desc to2, const void *x,
                  oar_cuda_desc tx, const void *x2, oar_cuda_desc tx2, const int64_t *a, int64_t n, int *bad,
                  void *stream) {
    (void)stream, (void)bad;
    if ((dt != 6 && dt != 7) || op < 0 || op > 3) return (int)cudaErrorInvalidValue;
    const bool fwd = op == 0 || op == 2;
    const oar_cuda_desc *ti = fwd ? &tx : &to, *tp = fwd ? &to : &tx; /* the input plane's view, the pooled one's */
    const int64_t H = ti->shape[ti->nd - 2], W = ti->shape[ti->nd - 1];
    const int64_t OH = tp->shape[tp->nd - 2], OW = tp->shape[tp->nd - 1];
    if (fwd)
        for (int64_t i = 0; i < n; i++) {
            int64_t ox = i % OW, oy = (i / OW) % OH, p = i / (OW * OH);
            if (op == 0) {
                int64_t y0 = oy * a[2] - a[4], x0 = ox * a[3] - a[5];
                int64_t y1 = y0 + (a[0] - 1) * a[6] + 1, x1 = x0 + (a[1] - 1) * a[7] + 1;
                if (y1 > H) y1 = H;
                if (x1 > W) x1 = W;
                while (y0 < 0) y0 += a[6];
                while (x0 < 0) x0 += a[7];
                int64_t best = y0 * W + x0;
                double m = -INFINITY;
                for (int64_t iy = y0; iy < y1; iy += a[6])
                    for (int64_t ix = x0; ix < x1; ix += a[7]) {
                        double v = FAKE_LD(x, dt, at_of(&tx, p * H * W + iy * W + ix));
                        if (v > m || v != v) m = v, best = iy * W + ix;
                    }
                FAKE_ST(o, dt, at_of(&to, i), m);
                FAKE_ST(o2, 3, at_of(&to2, i), (double)best);
            } else {
                int64_t y0, y1, x0, x1;
                double div = (double)fake_avg_window(a, H, W, oy, ox, &y0, &y1, &x0, &x1), s = 0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) s += FAKE_LD(x, dt, at_of(&tx, p * H * W + iy * W + ix));
                FAKE_ST(o, dt, at_of(&to, i), div != 0 ? s / div : 0);
            }
        }
    else
        for (int64_t p = 0; p < n; p++) {
            double *acc = calloc((size_t)(H * W > 0 ? H * W : 1), sizeof(double));
            if (!acc) return (int)cudaErrorMemoryAllocation;
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double g = FAKE_LD(x, dt, at_of(&tx, p * OH * OW + oy * OW + ox));
                    if (op == 1) {
                        int64_t q = (int64_t)FAKE_LD(x2, 3, at_of(&tx2, p * OH * OW + oy * OW + ox));
                        if (q >= 0 && q < H * W) acc[q] += g;
                        continue;
                    }
                    int64_t y0, y1, x0, x1;
                    double div = (double)fake_avg_window(a, H, W, oy, ox, &y0, &y1, &x0, &x1);
                    if (div == 0) continue;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++) acc[iy * W + ix] += g / div;
                }
            for (int64_t k = 0; k < H * W; k++) FAKE_ST(o, dt, at_of(&to, p * H * W + k), acc[k]);
            free(acc);
        }
    return 0;
}

int oar_cuda_index(int op, int32_t dt, void *o, oar_cuda_desc to, const void *x, oar_cuda_desc tx, const void *idx,
                   oar_cuda_desc ti, const void *src, oar_cuda_desc ts, int64_t dim, int64_t size, int *bad, int64_t n,
                   void *stream) {
    (void)stream;
    if ((dt != 6 && dt != 7) || op < 0 || op > 2) return (int)cudaErrorInvalidValue;
    *bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c[8] = {0}, rest = i;
        for (int64_t d = to.nd - 1; d >= 0; d--) c[d] = rest % to.shape[d], rest /= to.shape[d];
        if (op < 2) { /* gather, index_select: x at i's coordinates, dim's replaced by the index */
            int64_t j = (int64_t)FAKE_LD(idx, 3, op == 0 ? at_of(&ti, i) : ti.off + c[dim] * ti.st[0]);
            if (j < 0 || j >= size) {
                *bad = 1;
                if (op == 0) {
                    FAKE_ST(o, dt, at_of(&to, i), 0);
                    continue;
                }
                j = 0;
            }
            int64_t off = tx.off;
            for (int64_t d = 0; d < to.nd; d++) off += (d == dim ? j : c[d]) * tx.st[d];
            FAKE_ST(o, dt, at_of(&to, i), FAKE_LD(x, dt, off));
            continue;
        }
        double v = FAKE_LD(x, dt, at_of(&tx, i));
        bool inside = true;
        for (int64_t d = 0; d < ti.nd; d++)
            if (d != dim && c[d] >= ti.shape[d]) inside = false;
        for (int64_t t = 0; inside && t < (ti.nd ? ti.shape[dim] : 1); t++) {
            int64_t oi = ti.off, os = ts.off;
            for (int64_t d = 0; d < ti.nd; d++) oi += (d == dim ? t : c[d]) * ti.st[d], os += (d == dim ? t : c[d]) * ts.st[d];
            int64_t j = (int64_t)FAKE_LD(idx, 3, oi);
            if (j < 0 || j >= size) *bad = 1;
            else if (j == (to.nd ? c[dim] : 0)) v += FAKE_LD(src, dt, os);
        }
        FAKE_ST(o, dt, at_of(&to, i), v);
    }
    return 0;
}

#endif

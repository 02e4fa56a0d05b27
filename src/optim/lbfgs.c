/* L-BFGS with PyTorch's strong-Wolfe line search (torch/optim/lbfgs.py,
 * followed step by step so results agree to rounding). The point, the
 * gradient and the history are flat float64 vectors on the host; the
 * parameters are written back with oar_copy_ under no_grad. */
#include "../core/core.h"

#include <math.h>
#include <oar/autograd.h>
#include <oar/lbfgs.h>
#include <oar/ops.h>
#include <string.h>

struct oar_lbfgs {
    int np;
    oar_tensor **params;   /* retained */
    int64_t n;             /* total elements */
    double lr, tol_grad, tol_change;
    int max_iter, max_eval, hist;
    bool wolfe;
    /* state kept across steps */
    int64_t n_iter, func_evals;
    double *d, *prev_g, t, h_diag;
    double *dirs, *stps, *ro; /* hist x n ring (oldest at head) */
    int n_old, head;
};

static void *zalloc(size_t n) { return oari_calloc(n ? n : 1, 1); }
static void zfree(void *p, size_t n) { oari_free(p, n ? n : 1); }

void oar_lbfgs_free(oar_lbfgs *o) {
    if (!o) return;
    for (int i = 0; i < o->np; i++) oar_tensor_release(o->params[i]);
    size_t vn = (size_t)o->n * sizeof(double), hn = (size_t)o->hist * vn;
    zfree(o->params, (size_t)o->np * sizeof *o->params);
    zfree(o->d, vn);
    zfree(o->prev_g, vn);
    zfree(o->dirs, hn);
    zfree(o->stps, hn);
    zfree(o->ro, (size_t)o->hist * sizeof(double));
    oari_free(o, sizeof *o);
}

oar_lbfgs *oar_lbfgs_new(int np, oar_tensor *const *params, const oar_lbfgs_options *opt) {
    static const oar_lbfgs_options none;
    if (!opt) opt = &none;
    if (np < 1 || !params)
        return oari_error(OAR_ERR_INVALID, "oar_lbfgs_new: need at least one parameter (n = %d)", np), NULL;
    if (opt->lr < 0 || opt->max_iter < 0 || opt->max_eval < 0 || opt->history_size < 0 ||
        opt->tolerance_grad < 0 || opt->tolerance_change < 0)
        return oari_error(OAR_ERR_INVALID, "oar_lbfgs_new: negative option (lr %g, max_iter %d, "
                          "max_eval %d, history_size %d)", opt->lr, opt->max_iter, opt->max_eval,
                          opt->history_size), NULL;
    int64_t n = 0;
    for (int i = 0; i < np; i++) {
        if (!params[i]) {
            if (!oari_error_pending()) oari_error(OAR_ERR_INVALID, "oar_lbfgs_new: parameter %d is NULL", i);
            return NULL;
        }
        if (!oar_dtype_is_float(params[i]->dtype))
            return oari_error(OAR_ERR_INVALID, "oar_lbfgs_new: parameter %d has dtype %s; L-BFGS "
                              "updates floating tensors", i, oar_dtype_name(params[i]->dtype)), NULL;
        n += params[i]->numel;
    }
    oar_lbfgs *o = oari_calloc(1, sizeof *o);
    if (!o) return NULL;
    o->np = np;
    o->n = n;
    o->lr = opt->lr ? opt->lr : 1;
    o->max_iter = opt->max_iter ? opt->max_iter : 20;
    o->max_eval = opt->max_eval ? opt->max_eval : o->max_iter * 5 / 4;
    o->tol_grad = opt->tolerance_grad ? opt->tolerance_grad : 1e-7;
    o->tol_change = opt->tolerance_change ? opt->tolerance_change : 1e-9;
    o->hist = opt->history_size ? opt->history_size : 100;
    o->wolfe = opt->strong_wolfe;
    size_t vn = (size_t)n * sizeof(double), hn = (size_t)o->hist * vn;
    o->params = zalloc((size_t)np * sizeof *o->params);
    o->d = zalloc(vn);
    o->prev_g = zalloc(vn);
    o->dirs = zalloc(hn);
    o->stps = zalloc(hn);
    o->ro = zalloc((size_t)o->hist * sizeof(double));
    if (!o->params || !o->d || !o->prev_g || !o->dirs || !o->stps || !o->ro) {
        o->np = 0; /* nothing retained yet */
        oar_lbfgs_free(o);
        return NULL;
    }
    for (int i = 0; i < np; i++) o->params[i] = oar_tensor_retain(params[i]);
    return o;
}

int64_t oar_lbfgs_evals(const oar_lbfgs *o) {
    return o ? o->func_evals : (oari_null_arg(__func__, "optimizer"), -1);
}

/* ---- flat vectors <-> parameters ----------------------------------------- */

/* The parameters' values (grad = false) or gradients (zeros where none). */
static int gather(oar_lbfgs *o, double *out, bool grad) {
    int64_t off = 0;
    for (int i = 0; i < o->np; i++) {
        oar_tensor *p = o->params[i], *src = grad ? oar_tensor_grad(p) : p;
        int64_t m = p->numel;
        if (!src) {
            memset(out + off, 0, (size_t)m * sizeof *out);
        } else {
            oar_pool *pool = oar_pool_push();
            oar_tensor *c = oar_cast(src, OAR_F64);
            int st = c ? oar_tensor_to_host(c, out + off, (size_t)m * sizeof *out) : oari_fail_status();
            oar_pool_pop(pool);
            if (st) return oari_error(st, "oar_lbfgs_step: cannot read parameter %d%s", i,
                                      grad ? "'s gradient" : "");
        }
        off += m;
    }
    return 0;
}

static int scatter(oar_lbfgs *o, const double *x) {
    int64_t off = 0;
    int st = 0;
    oar_no_grad_push();
    for (int i = 0; i < o->np && !st; i++) {
        oar_tensor *p = o->params[i];
        oar_pool *pool = oar_pool_push();
        oar_tensor *v = oar_tensor_from_data(x + off, OAR_F64, p->ndim, p->shape);
        st = v ? oar_copy_(p, v) : oari_fail_status();
        oar_pool_pop(pool);
        off += p->numel;
    }
    oar_no_grad_pop();
    return st ? oari_error(st, "oar_lbfgs_step: cannot write the parameters") : 0;
}

/* x <- x + t d on the parameters (PyTorch's _add_grad, rounding in the
 * parameters' dtype). */
static int add_step(oar_lbfgs *o, double t, const double *d, double *scratch) {
    int st = gather(o, scratch, false);
    if (st) return st;
    for (int64_t i = 0; i < o->n; i++) scratch[i] += t * d[i];
    return scatter(o, scratch);
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static double amax(const double *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* ---- the line search ------------------------------------------------------ */

typedef struct {
    oar_lbfgs *o;
    oar_lbfgs_closure closure;
    void *ctx;
    const double *x0;  /* point at the start of the search */
    double *scratch;
} ls_env;

/* loss and gradient at x0 + t d; the parameters are left at x0. */
static int dir_eval(ls_env *e, double t, const double *d, double *f, double *g) {
    oar_lbfgs *o = e->o;
    double *x = e->scratch;
    for (int64_t i = 0; i < o->n; i++) x[i] = e->x0[i];
    int st = add_step(o, t, d, x);
    if (!st) {
        *f = e->closure(e->ctx);
        o->func_evals++;
        if (isnan(*f)) st = oari_error(OAR_ERR_INVALID, "oar_lbfgs_step: the closure failed (%s)",
                                       oar_last_error());
    }
    if (!st) st = gather(o, g, true);
    int st2 = scatter(o, e->x0);
    return st ? st : st2;
}

static double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                                bool bounded, double lo, double hi) {
    double xmin = bounded ? lo : (x1 <= x2 ? x1 : x2), xmax = bounded ? hi : (x1 <= x2 ? x2 : x1);
    double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
    double d2sq = d1 * d1 - g1 * g2;
    if (d2sq >= 0) {
        double d2 = sqrt(d2sq), pos;
        if (x1 <= x2) pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2));
        else pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
        return fmin(fmax(pos, xmin), xmax);
    }
    return (xmin + xmax) / 2;
}

/* PyTorch's _strong_wolfe. In: f, g (n), gtd at t = 0, first trial t.
 * Out: *f_out, g_out (n), *t_out. Buffers: gn, gp, gb0, gb1 (n each). */
static int strong_wolfe(ls_env *e, const double *d, double t, double f, const double *g, double gtd,
                        double *f_out, double *g_out, double *t_out, double *bufs) {
    const int64_t n = e->o->n;
    const double c1 = 1e-4, c2 = 0.9, tol = e->o->tol_change;
    const int max_ls = 25;
    double *g_new = bufs, *g_prev = bufs + n, *bg[2] = {bufs + 2 * n, bufs + 3 * n};
    const size_t vb = (size_t)n * sizeof(double);
    double d_norm = amax(d, n), f_new;
    int st = dir_eval(e, t, d, &f_new, g_new);
    if (st) return st;
    double gtd_new = dot(g_new, d, n);
    double t_prev = 0, f_prev = f, gtd_prev = gtd;
    memcpy(g_prev, g, vb);
    bool done = false;
    int ls_iter = 0, nb = 0;
    double br[2] = {0}, bf[2] = {0}, bgtd[2] = {0};
    while (ls_iter < max_ls) {
        bool wolfe_ok = fabs(gtd_new) <= -c2 * gtd;
        bool sufficient = !(f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev));
        if (!sufficient || (!wolfe_ok && gtd_new >= 0)) { /* a bracket [t_prev, t] */
            nb = 2;
            br[0] = t_prev, br[1] = t, bf[0] = f_prev, bf[1] = f_new;
            bgtd[0] = gtd_prev, bgtd[1] = gtd_new;
            memcpy(bg[0], g_prev, vb);
            memcpy(bg[1], g_new, vb);
            break;
        }
        if (wolfe_ok) {
            nb = 1;
            br[0] = t, bf[0] = f_new, bgtd[0] = gtd_new;
            memcpy(bg[0], g_new, vb);
            done = true;
            break;
        }
        double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
        t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, true, min_step, max_step);
        t_prev = tmp, f_prev = f_new, gtd_prev = gtd_new;
        memcpy(g_prev, g_new, vb);
        if ((st = dir_eval(e, t, d, &f_new, g_new))) return st;
        gtd_new = dot(g_new, d, n);
        ls_iter++;
    }
    if (ls_iter == max_ls) {
        nb = 2;
        br[0] = 0, br[1] = t, bf[0] = f, bf[1] = f_new;
        memcpy(bg[0], g, vb);
        memcpy(bg[1], g_new, vb);
    }
    /* zoom */
    bool insuf = false;
    int lo = bf[0] <= bf[nb - 1] ? 0 : 1, hi = 1 - lo;
    if (nb == 1) lo = 0;
    while (!done && ls_iter < max_ls) {
        if (fabs(br[1] - br[0]) * d_norm < tol) break;
        t = cubic_interpolate(br[0], bf[0], bgtd[0], br[1], bf[1], bgtd[1], false, 0, 0);
        double bmax = fmax(br[0], br[1]), bmin = fmin(br[0], br[1]), eps = 0.1 * (bmax - bmin);
        if (fmin(bmax - t, t - bmin) < eps) {
            if (insuf || t >= bmax || t <= bmin) {
                t = fabs(t - bmax) < fabs(t - bmin) ? bmax - eps : bmin + eps;
                insuf = false;
            } else {
                insuf = true;
            }
        } else {
            insuf = false;
        }
        if ((st = dir_eval(e, t, d, &f_new, g_new))) return st;
        gtd_new = dot(g_new, d, n);
        ls_iter++;
        if (f_new > f + c1 * t * gtd || f_new >= bf[lo]) {
            br[hi] = t, bf[hi] = f_new, bgtd[hi] = gtd_new;
            memcpy(bg[hi], g_new, vb);
            lo = bf[0] <= bf[1] ? 0 : 1, hi = 1 - lo;
        } else {
            if (fabs(gtd_new) <= -c2 * gtd) done = true;
            else if (gtd_new * (br[hi] - br[lo]) >= 0) {
                br[hi] = br[lo], bf[hi] = bf[lo], bgtd[hi] = bgtd[lo];
                memcpy(bg[hi], bg[lo], vb);
            }
            br[lo] = t, bf[lo] = f_new, bgtd[lo] = gtd_new;
            memcpy(bg[lo], g_new, vb);
        }
    }
    *t_out = br[lo];
    *f_out = bf[lo];
    memcpy(g_out, bg[lo], vb);
    return 0;
}

/* ---- the step -------------------------------------------------------------- */

int oar_lbfgs_step(oar_lbfgs *o, oar_lbfgs_closure closure, void *ctx, double *loss_out) {
    if (!o || !closure)
        return oari_error(OAR_ERR_INVALID, "oar_lbfgs_step: %s is NULL", o ? "closure" : "optimizer");
    const int64_t n = o->n;
    const size_t vb = (size_t)n * sizeof(double);
    double *g = zalloc(vb), *x0 = zalloc(vb), *scratch = zalloc(vb), *q = zalloc(vb);
    double *bufs = zalloc(4 * vb), *al = zalloc((size_t)o->hist * sizeof(double));
    int st = g && x0 && scratch && q && bufs && al ? 0 : oari_fail_status();
    double loss = NAN, orig = NAN;
    if (!st) {
        orig = loss = closure(ctx);
        o->func_evals++;
        if (isnan(loss)) st = oari_error(OAR_ERR_INVALID, "oar_lbfgs_step: the closure failed (%s)",
                                         oar_last_error());
    }
    if (!st) st = gather(o, g, true);
    int64_t evals = 1, it = 0;
    if (!st && amax(g, n) > o->tol_grad) {
        while (it < o->max_iter) {
            it++;
            o->n_iter++;
            if (o->n_iter == 1) {
                for (int64_t i = 0; i < n; i++) o->d[i] = -g[i];
                o->n_old = o->head = 0;
                o->h_diag = 1;
            } else {
                /* y = g - prev_g, s = d t */
                double *y = q, ys = 0;
                for (int64_t i = 0; i < n; i++) y[i] = g[i] - o->prev_g[i];
                for (int64_t i = 0; i < n; i++) ys += y[i] * o->d[i] * o->t;
                if (ys > 1e-10) {
                    int slot;
                    if (o->n_old == o->hist) {
                        slot = o->head;
                        o->head = (o->head + 1) % o->hist;
                    } else {
                        slot = (o->head + o->n_old) % o->hist;
                        o->n_old++;
                    }
                    double *ds = o->dirs + (size_t)slot * n, *ss = o->stps + (size_t)slot * n;
                    for (int64_t i = 0; i < n; i++) ds[i] = y[i], ss[i] = o->d[i] * o->t;
                    o->ro[slot] = 1.0 / ys;
                    o->h_diag = ys / dot(y, y, n);
                }
                /* two-loop recursion over the history, oldest first */
                for (int64_t i = 0; i < n; i++) q[i] = -g[i];
                for (int k = o->n_old - 1; k >= 0; k--) {
                    int s = (o->head + k) % o->hist;
                    al[k] = dot(o->stps + (size_t)s * n, q, n) * o->ro[s];
                    const double *ds = o->dirs + (size_t)s * n;
                    for (int64_t i = 0; i < n; i++) q[i] -= al[k] * ds[i];
                }
                for (int64_t i = 0; i < n; i++) o->d[i] = q[i] * o->h_diag;
                for (int k = 0; k < o->n_old; k++) {
                    int s = (o->head + k) % o->hist;
                    double be = dot(o->dirs + (size_t)s * n, o->d, n) * o->ro[s];
                    const double *ss = o->stps + (size_t)s * n;
                    for (int64_t i = 0; i < n; i++) o->d[i] += (al[k] - be) * ss[i];
                }
            }
            memcpy(o->prev_g, g, vb);
            double prev_loss = loss;
            if (o->n_iter == 1) {
                double s1 = 0;
                for (int64_t i = 0; i < n; i++) s1 += fabs(g[i]);
                o->t = fmin(1.0, 1.0 / s1) * o->lr;
            } else {
                o->t = o->lr;
            }
            double gtd = dot(g, o->d, n);
            if (gtd > -o->tol_change) break;
            int64_t ls_evals = 0;
            bool opt_cond = false;
            if (o->wolfe) {
                if ((st = gather(o, x0, false))) break;
                ls_env e = {o, closure, ctx, x0, scratch};
                int64_t before = o->func_evals;
                double t_new;
                if ((st = strong_wolfe(&e, o->d, o->t, loss, g, gtd, &loss, g, &t_new, bufs))) break;
                o->t = t_new;
                ls_evals = o->func_evals - before;
                if ((st = add_step(o, o->t, o->d, scratch))) break;
                opt_cond = amax(g, n) <= o->tol_grad;
            } else {
                if ((st = add_step(o, o->t, o->d, scratch))) break;
                if (it != o->max_iter) {
                    loss = closure(ctx);
                    o->func_evals++;
                    if (isnan(loss)) {
                        st = oari_error(OAR_ERR_INVALID, "oar_lbfgs_step: the closure failed (%s)",
                                        oar_last_error());
                        break;
                    }
                    if ((st = gather(o, g, true))) break;
                    opt_cond = amax(g, n) <= o->tol_grad;
                    ls_evals = 1;
                }
            }
            evals += ls_evals;
            if (it == o->max_iter || evals >= o->max_eval || opt_cond) break;
            if (amax(o->d, n) * fabs(o->t) <= o->tol_change) break;
            if (fabs(loss - prev_loss) < o->tol_change) break;
        }
    }
    zfree(g, vb);
    zfree(x0, vb);
    zfree(scratch, vb);
    zfree(q, vb);
    zfree(bufs, 4 * vb);
    zfree(al, (size_t)o->hist * sizeof(double));
    if (loss_out) *loss_out = orig;
    return st;
}

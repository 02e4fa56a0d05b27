/* The cost model: alpha-beta collectives, compute time per op family,
 * memory per rank, per-layer placement by propagation, pipeline stages,
 * and one configuration's step time (docs/internals/plan.md). */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the cluster ---------------------------------------------------------- */

int oar_cluster_preset(oar_cluster *c, const char *kind, int n_devices) {
    if (!c) return oari_null_arg("oar_cluster_preset", "cluster");
    if (!kind) return oari_null_arg("oar_cluster_preset", "kind");
    if (n_devices <= 0)
        return oari_error(OAR_ERR_INVALID, "oar_cluster_preset: %d devices: must be > 0", n_devices);
    const double G = 1e9, T = 1e12;
    if (!strcmp(kind, "h200"))
        *c = (oar_cluster){.n_devices = n_devices, .devices_per_node = 8, .mem_bytes = 141 * G,
                           .flops = 989 * T * 0.5, .mem_bw = 4.8 * T, .intra_bw = 450 * G, .intra_lat = 5e-6,
                           .inter_bw = 50 * G, .inter_lat = 10e-6, .op_overhead = 5e-6};
    else if (!strcmp(kind, "a100"))
        *c = (oar_cluster){.n_devices = n_devices, .devices_per_node = 8, .mem_bytes = 80 * G,
                           .flops = 312 * T * 0.5, .mem_bw = 2.0 * T, .intra_bw = 300 * G, .intra_lat = 5e-6,
                           .inter_bw = 25 * G, .inter_lat = 10e-6, .op_overhead = 5e-6};
    else
        return oari_error(OAR_ERR_INVALID, "oar_cluster_preset: unknown kind '%s' (known: h200, a100)", kind);
    if (n_devices < c->devices_per_node) c->devices_per_node = n_devices;
    return 0;
}

int oar_cluster_check(const oar_cluster *c) {
    if (!c) return oari_null_arg("oar_cluster_check", "cluster");
    if (c->n_devices <= 0) return oari_error(OAR_ERR_INVALID, "cluster: %d devices: must be > 0", c->n_devices);
    if (c->devices_per_node <= 0 ||
        (c->n_devices > c->devices_per_node && c->n_devices % c->devices_per_node))
        return oari_error(OAR_ERR_INVALID, "cluster: %d devices per node: must be > 0 and divide the %d devices",
                          c->devices_per_node, c->n_devices);
    const double pos[] = {c->mem_bytes, c->flops, c->mem_bw, c->intra_bw, c->inter_bw};
    static const char *const pn[] = {"memory per device", "FLOP/s", "memory bandwidth", "bandwidth inside a node",
                                     "bandwidth across nodes"};
    for (int i = 0; i < 5; i++)
        if (!isfinite(pos[i]) || pos[i] <= 0)
            return oari_error(OAR_ERR_INVALID, "cluster: %s %g: must be finite and > 0", pn[i], pos[i]);
    const double nn[] = {c->intra_lat, c->inter_lat, c->op_overhead, c->sync_lat, c->sync_phase};
    static const char *const nnn[] = {"latency inside a node", "latency across nodes", "op overhead",
                                      "synchronisation wait", "synchronisation phase"};
    for (int i = 0; i < 5; i++)
        if (!isfinite(nn[i]) || nn[i] < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: %s %g: must be finite and >= 0", nnn[i], nn[i]);
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++)
        if (!isfinite(c->family_bw[i]) || c->family_bw[i] < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: family_bw[%d] (%s) %g: must be finite and >= 0", i,
                              oar_plan_op_family_names[i], c->family_bw[i]);
    if (!isfinite(c->optim_time_per_param) || c->optim_time_per_param < 0)
        return oari_error(OAR_ERR_INVALID, "cluster: optimizer time per parameter %g: must be finite and >= 0",
                          c->optim_time_per_param);
    int pos_rates = 0, pos_wide = 0;
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) {
        double r = c->gemm_rate[i], w = c->gemm_rate_wide[i];
        if (!isfinite(r) || r < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: gemm_rate[%d] %g: must be finite and >= 0", i, r);
        if (!isfinite(w) || w < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: gemm_rate_wide[%d] %g: must be finite and >= 0", i, w);
        pos_rates += r > 0, pos_wide += w > 0;
    }
    if (pos_rates && pos_rates < OAR_PLAN_GEMM_CLASSES)
        return oari_error(OAR_ERR_INVALID, "cluster: %d of the %d gemm_rate entries are 0: give all (as "
                          "oar_plan_calibrate measures them) or none", OAR_PLAN_GEMM_CLASSES - pos_rates,
                          OAR_PLAN_GEMM_CLASSES);
    if (pos_wide && (pos_wide < OAR_PLAN_GEMM_CLASSES || !pos_rates))
        return oari_error(OAR_ERR_INVALID, "cluster: %d of the %d gemm_rate_wide entries are 0%s: give all (and "
                          "gemm_rate) or none", OAR_PLAN_GEMM_CLASSES - pos_wide, OAR_PLAN_GEMM_CLASSES,
                          pos_rates ? "" : ", and gemm_rate has none");
    const double cold[] = {c->cache_bytes, c->mem_bw_cold, c->optim_time_cold};
    static const char *const coldn[] = {"cache bytes", "mem_bw_cold", "optim_time_cold"};
    for (int i = 0; i < 3; i++)
        if (!isfinite(cold[i]) || cold[i] < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: %s %g: must be finite and >= 0", coldn[i], cold[i]);
    int pos_cold = 0;
    for (int i = 0; i < OAR_PLAN_GEMM_CLASSES; i++) {
        double r = c->gemm_rate_cold[i];
        if (!isfinite(r) || r < 0)
            return oari_error(OAR_ERR_INVALID, "cluster: gemm_rate_cold[%d] %g: must be finite and >= 0", i, r);
        pos_cold += r > 0;
    }
    if (pos_cold && pos_cold < OAR_PLAN_GEMM_CLASSES)
        return oari_error(OAR_ERR_INVALID, "cluster: %d of the %d gemm_rate_cold entries are 0: give all or none",
                          OAR_PLAN_GEMM_CLASSES - pos_cold, OAR_PLAN_GEMM_CLASSES);
    return 0;
}

/* ---- closed forms ----------------------------------------------------------- */

double oar_plan_allreduce_time(double bytes, int n, double alpha, double bw) {
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bw;
}

double oar_plan_compute_time(double flops, double bytes, int n_ops, const oar_cluster *c) {
    if (!c) return oari_null_arg("oar_plan_compute_time", "cluster"), -1;
    return flops / c->flops + bytes / c->mem_bw + n_ops * c->op_overhead;
}

const char *const oar_plan_op_family_names[OAR_PLAN_OP_FAMILIES] = {"transcendental", "norm", "softmax", "select"};

double oar_plan_memory_time(const oar_plan_layer *l, double samples, const oar_cluster *c) {
    if (!l) return oari_null_arg("oar_plan_memory_time", "layer"), -1;
    if (!c) return oari_null_arg("oar_plan_memory_time", "cluster"), -1;
    double plain = l->bytes, t = 0;
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) {
        double fb = l->family_bytes[i];
        if (!(fb > 0)) continue;
        plain -= fb;
        t += fb / (c->family_bw[i] > 0 ? c->family_bw[i] : c->mem_bw);
    }
    return samples * (t + fmax(0, plain) / c->mem_bw);
}

/* A rate table's value at smallest dimension dim (> 0): linear in log dim, clamped. */
static double table_rate(const double *r, double dim) {
    const double *d = oar_plan_gemm_dims;
    const int n = OAR_PLAN_GEMM_CLASSES;
    if (dim <= d[0]) return r[0];
    if (dim >= d[n - 1]) return r[n - 1];
    int i = 0;
    while (dim > d[i + 1]) i++;
    double w = (log(dim) - log(d[i])) / (log(d[i + 1]) - log(d[i]));
    return r[i] + w * (r[i + 1] - r[i]);
}

double oar_plan_gemm_time_weight(double flops, double dim, double weight, const oar_cluster *c) {
    if (!c) return oari_null_arg("oar_plan_gemm_time_weight", "cluster"), -1;
    if (!(dim > 0) || !(c->gemm_rate[0] > 0)) return flops / c->flops;
    double r = table_rate(c->gemm_rate, dim);
    if (weight > 0 && c->gemm_rate_wide[0] > 0) {
        double w = log(weight / OAR_PLAN_GEMM_WEIGHT) / log(OAR_PLAN_GEMM_WEIGHT_WIDE / OAR_PLAN_GEMM_WEIGHT);
        w = fmin(1, fmax(0, w));
        r += w * (table_rate(c->gemm_rate_wide, dim) - r);
    }
    return flops / r;
}

double oar_plan_gemm_time(double flops, double dim, const oar_cluster *c) {
    if (!c) return oari_null_arg("oar_plan_gemm_time", "cluster"), -1;
    return oar_plan_gemm_time_weight(flops, dim, 0, c);
}

/* ---- memory past the cache ---------------------------------------------------- */

/* The fraction h of a node's working set the cache holds runs at the warm rates, the rest at
 * the cold ones (oar_cluster.cache_bytes): time h t_warm + (1 - h) t_cold. A GEMM with a
 * weight streams that weight; one without (attention's) is left warm. */
static double weight_gemm_time(double flops, double dim, double weight, const oar_cluster *c, double hot) {
    double t = oar_plan_gemm_time_weight(flops, dim, weight, c);
    if (hot >= 1 || !(weight > 0) || !(dim > 0) || !(c->gemm_rate_cold[0] > 0)) return t;
    return hot * t + (1 - hot) * flops / table_rate(c->gemm_rate_cold, dim);
}

/* Seconds per byte of a stream over the gradients (accumulation: two reads, one write). */
static double stream_time_per_byte(const oar_cluster *c, double hot) {
    double cold = c->mem_bw_cold > 0 ? c->mem_bw_cold : c->mem_bw;
    return hot / c->mem_bw + (1 - hot) / cold;
}

/* Seconds per parameter element of the optimizer step: as calibrated, or Adam reading p, g, m,
 * v and writing p, m, v (f32): 28 bytes an element. */
static double optim_per_param(const oar_cluster *c, double hot) {
    double warm = c->optim_time_per_param > 0 ? c->optim_time_per_param : 28.0 / c->mem_bw;
    double cold = c->optim_time_cold > 0 ? c->optim_time_cold : warm;
    return hot * warm + (1 - hot) * cold;
}

const char *oari_place_name(oari_place p) {
    static const char *const n[] = {"replicate", "shard", "column", "row", "block"};
    return (unsigned)p <= OARI_PLACE_BLOCK ? n[p] : "?";
}

/* The wait for the slowest rank at a synchronising collective that follows
 * `phase` seconds of compute: sync_lat, scaled down for phases shorter than
 * the one it was measured after (ranks drift apart as they compute, up to
 * about a time slice). */
static double sync_wait(const oar_cluster *c, double phase) {
    if (!(c->sync_lat > 0)) return 0;
    if (!(c->sync_phase > 0)) return c->sync_lat;
    return c->sync_lat * fmin(1, fmax(0, phase) / c->sync_phase);
}

/* A group of n ranks whose members are `stride` ranks apart: across nodes
 * when it spans more than one. Time of one collective over it moving
 * `part` of a ring all-reduce's traffic (1: all-reduce; 0.5: reduce-scatter
 * or all-gather) of bytes, after `phase` seconds of compute (the wait for
 * the slowest member, sync_wait). */
static double group_coll(const oar_cluster *c, double bytes, int n, int stride, double part, double phase) {
    if (n <= 1) return 0;
    bool across = (double)n * stride > c->devices_per_node;
    return part * oar_plan_allreduce_time(bytes, n, across ? c->inter_lat : c->intra_lat,
                                          across ? c->inter_bw : c->intra_bw) + sync_wait(c, phase);
}
static double group_ar(const oar_cluster *c, double bytes, int n, int stride, double phase) {
    return group_coll(c, bytes, n, stride, 1, phase);
}

/* ---- checking a configuration ------------------------------------------------- */

int oari_plan_check_config(const oar_plan_model *m, const oar_cluster *c, int64_t B, const oar_plan_config *k,
                           char *why, size_t cap) {
    char buf[200];
    if (!why) why = buf, cap = sizeof buf;
    why[0] = 0;
    if (k->dp <= 0 || k->tp <= 0 || k->pp <= 0 || k->micro_batches <= 0 || k->zero < 0 || k->zero > 3 ||
        k->recompute < 0 || k->recompute > 1)
        snprintf(why, cap, "degrees dp %d tp %d pp %d, micro-batches %d must be > 0, ZeRO 0..3, recompute 0 or 1",
                 k->dp, k->tp, k->pp, k->micro_batches);
    else if ((int64_t)k->dp * k->tp * k->pp != c->n_devices)
        snprintf(why, cap, "dp %d x tp %d x pp %d is not the %d devices", k->dp, k->tp, k->pp, c->n_devices);
    else if (B % ((int64_t)k->dp * k->micro_batches))
        snprintf(why, cap, "batch %lld is not a multiple of dp %d x micro-batches %d", (long long)B, k->dp,
                 k->micro_batches);
    else if (k->pp > m->n)
        snprintf(why, cap, "pp %d is more stages than the %d layers", k->pp, m->n);
    else if (k->zero > 0 && k->dp == 1)
        snprintf(why, cap, "ZeRO %d shards over data parallel ranks, and dp is 1", k->zero);
    else
        for (int i = 0; i < m->n; i++) {
            int tm = m->layers[i].tp_max;
            if (k->tp > 1 && tm > 0 && tm % k->tp && m->layers[i].kind >= OAR_PLAN_LAYER_LINEAR) {
                snprintf(why, cap, "tp %d does not divide layer %s (%d ways at most)", k->tp, m->layers[i].name, tm);
                break;
            }
        }
    return why[0] ? OAR_ERR_INVALID : 0;
}

/* ---- placements by propagation ---------------------------------------------------- */

/* The activation between layers is replicated (R) or feature-sharded (S).
 * Each layer's options read one layout and make one, at a cost in time
 * (forward, backward, recompute, collectives) and memory (parameters);
 * a Viterbi pass over the chain picks the cheapest R-to-R path, memory
 * breaking ties. */
typedef struct lay_cost {
    double t;   /* seconds per micro-batch: compute (fwd + bwd [+ fwd]) + tensor-parallel collectives */
    double tc;  /* the collectives' part */
    double p;   /* parameters held per rank */
    double act; /* activation bytes per sample kept */
    double fwd, bwd; /* the compute of its forward and of its backward (no collectives) */
} lay_cost;

/* The smallest dimension of layer l's weight GEMMs at micro-batch b under
 * placement pl over tp ranks (a column split divides the output features,
 * a row split the input features, a block both); 0: unknown. *weight gets
 * this rank's weight elements, k x n (0: unknown). */
static double gemm_dim(const oar_plan_layer *l, double b, int tp, oari_place pl, double *weight) {
    *weight = 0;
    if (!(l->gemm_rows > 0) || !(l->gemm_k > 0) || !(l->gemm_n > 0)) return 0;
    double k = l->gemm_k, n = l->gemm_n;
    if (pl == OARI_PLACE_ROW || pl == OARI_PLACE_BLOCK) k /= tp;
    if (pl == OARI_PLACE_COLUMN || pl == OARI_PLACE_BLOCK) n /= tp;
    *weight = k * n;
    return fmin(b * l->gemm_rows, fmin(k, n));
}

/* first: the model's first layer, whose input (the batch) needs no
 * gradient: its backward runs one GEMM per forward GEMM (the weight's
 * gradient, not the input's) and no collective for the input's gradient. */
static lay_cost option_cost(const oar_plan_layer *l, const oar_cluster *c, int tp, double b, int recompute,
                            oari_place pl, bool first, double hot) {
    double f = (pl == OARI_PLACE_REPLICATE) ? 1 : tp, weight;
    double dim = gemm_dim(l, b, tp, pl, &weight);
    double gemm = weight_gemm_time(l->flops * b / f, dim, weight, c, hot);
    double rest = oar_plan_memory_time(l, b / f, c) + l->n_ops * c->op_overhead;
    /* backward: two forwards (the first layer's GEMMs: one); recompute adds a forward */
    double fwd = gemm + rest, bwd = gemm * (first ? 1 : 2) + 2 * rest;
    double t = fwd * (recompute ? 2 : 1) + bwd;
    double ar_f = 0, ar_b = 0;         /* collectives in forward and backward, each after its pass */
    if (pl == OARI_PLACE_BLOCK) {
        ar_f = group_ar(c, l->out_bytes * b, tp, 1, fwd);
        ar_b = first ? 0 : group_ar(c, l->in_bytes * b, tp, 1, bwd);
    } else if (pl == OARI_PLACE_COLUMN) {
        ar_b = first ? 0 : group_ar(c, l->in_bytes * b, tp, 1, bwd);
    } else if (pl == OARI_PLACE_ROW) {
        ar_f = group_ar(c, l->out_bytes * b, tp, 1, fwd);
    }
    double tc = ar_f * (recompute ? 2 : 1) + ar_b;
    return (lay_cost){.t = t + tc, .tc = tc, .p = l->params / f, .act = l->act_bytes / f, .fwd = fwd, .bwd = bwd};
}

/* The all-gather making a sharded activation replicated (half an all-reduce). */
static double gather_cost(double bytes, const oar_cluster *c, int tp, double phase) {
    return group_coll(c, bytes, tp, 1, 0.5, phase);
}

/* Time first, parameters breaking ties; mem_first: the other way round. */
static bool better(double t, double p, double bt, double bp, bool mem_first) {
    if (mem_first) {
        if (p < bp * (1 - 1e-9)) return true;
        if (p > bp * (1 + 1e-9)) return false;
        return t < bt;
    }
    if (t < bt * (1 - 1e-9)) return true;
    if (t > bt * (1 + 1e-9)) return false;
    return p < bp;
}

/* Fills place[], and per-layer costs lc[], for tensor degree tp. */
static void place_layers(const oar_plan_model *m, const oar_cluster *c, int tp, double b, int recompute,
                         bool mem_first, double hot, oari_place *place, lay_cost *lc, int8_t *from /* 2 * n */) {
    if (tp == 1) {
        for (int i = 0; i < m->n; i++) {
            place[i] = OARI_PLACE_REPLICATE;
            lc[i] = option_cost(&m->layers[i], c, 1, b, recompute, OARI_PLACE_REPLICATE, i == 0, hot);
        }
        return;
    }
    /* Viterbi over layouts: ct[s], cp[s]: time and parameters of the best
     * path making layout s after layer i; from[2i + s] packs the layout it
     * read (bit 0) and the placement it took (bits 1..3) */
    const double INF = HUGE_VAL;
    double ct[2] = {0, INF}, cp[2] = {0, INF};
    for (int i = 0; i < m->n; i++) {
        const oar_plan_layer *l = &m->layers[i];
        bool split = l->kind >= OAR_PLAN_LAYER_LINEAR && (l->tp_max == 0 || l->tp_max % tp == 0);
        double nt[2] = {INF, INF}, np[2] = {INF, INF};
        int8_t nf[2] = {0, 0};
        typedef struct { int in; oari_place pl; int out; } option; /* read layout, placement, made layout */
        option opts[6];
        int no = 0;
        opts[no++] = (option){0, OARI_PLACE_REPLICATE, 0};
        opts[no++] = (option){1, OARI_PLACE_REPLICATE, 0}; /* gathers first */
        if (l->kind == OAR_PLAN_LAYER_POINTWISE) opts[no++] = (option){1, OARI_PLACE_SHARD, 1};
        if (l->kind == OAR_PLAN_LAYER_LINEAR && split) {
            if (!l->residual) opts[no++] = (option){0, OARI_PLACE_COLUMN, 1};
            opts[no++] = (option){1, OARI_PLACE_ROW, 0};
        }
        if (l->kind == OAR_PLAN_LAYER_BLOCK && split) {
            opts[no++] = (option){0, OARI_PLACE_BLOCK, 0};
            opts[no++] = (option){1, OARI_PLACE_BLOCK, 0};
        }
        for (int o = 0; o < no; o++) {
            int in = opts[o].in, out = opts[o].out;
            if (ct[in] == INF) continue;
            lay_cost k = option_cost(l, c, tp, b, recompute, opts[o].pl, i == 0, hot);
            double t = ct[in] + k.t;
            if (in == 1 && (opts[o].pl == OARI_PLACE_REPLICATE || opts[o].pl == OARI_PLACE_BLOCK))
                t += gather_cost(l->in_bytes * b, c, tp, k.fwd);
            double p = cp[in] + k.p;
            if (better(t, p, nt[out], np[out], mem_first)) {
                nt[out] = t, np[out] = p;
                nf[out] = (int8_t)(in | (int)opts[o].pl << 1);
            }
        }
        for (int s = 0; s < 2; s++) {
            ct[s] = nt[s], cp[s] = np[s];
            from[2 * i + s] = nf[s];
        }
    }
    /* back from a replicated output (always reachable: replicate is always open) */
    int s = 0;
    for (int i = m->n - 1; i >= 0; i--) {
        place[i] = (oari_place)(from[2 * i + s] >> 1);
        s = from[2 * i + s] & 1;
    }
    /* costs of the chosen placements, gathers charged to the layer that needs them */
    int lay = 0;
    for (int i = 0; i < m->n; i++) {
        lc[i] = option_cost(&m->layers[i], c, tp, b, recompute, place[i], i == 0, hot);
        if (lay == 1 && (place[i] == OARI_PLACE_REPLICATE || place[i] == OARI_PLACE_BLOCK)) {
            double g = gather_cost(m->layers[i].in_bytes * b, c, tp, lc[i].fwd);
            lc[i].t += g, lc[i].tc += g;
        }
        lay = (place[i] == OARI_PLACE_COLUMN || place[i] == OARI_PLACE_SHARD) ? 1 : 0;
    }
}

/* ---- pipeline stages ------------------------------------------------------------- */

/* Splits t[0..n) into pp contiguous stages minimising the largest sum
 * (binary search on that sum, greedy fill); first[s] is stage s's first
 * layer, first[pp] = n. Returns the largest stage sum. */
static double split_stages(const double *t, int n, int pp, int *first) {
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) lo = t[i] > lo ? t[i] : lo, hi += t[i];
    for (int it = 0; it < 60 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi), acc = 0;
        int stages = 1;
        for (int i = 0; i < n; i++) {
            if (acc + t[i] > mid && acc > 0) stages++, acc = 0;
            acc += t[i];
        }
        if (stages <= pp) hi = mid;
        else lo = mid;
    }
    /* greedy with cap hi, then make sure every stage has a layer */
    int s = 0;
    double acc = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        bool must = n - i <= pp - 1 - s; /* as many layers left as stages to fill */
        if (s < pp - 1 && acc > 0 && (acc + t[i] > hi * (1 + 1e-12) || must)) first[++s] = i, acc = 0;
        acc += t[i];
    }
    while (s < pp - 1) first[++s] = n; /* (cannot happen with pp <= n) */
    first[pp] = n;
    double worst = 0;
    for (int k = 0; k < pp; k++) {
        double sum = 0;
        for (int i = first[k]; i < first[k + 1]; i++) sum += t[i];
        worst = sum > worst ? sum : worst;
    }
    return worst;
}

/* ---- one configuration -------------------------------------------------------------- */

static void estimate_with(const oar_plan_model *m, const oar_cluster *c, int64_t B, const oar_plan_config *k,
                          bool mem_first, double hot, oar_plan_estimate *e, oari_place *place_out,
                          int *stage_out, bool *splits) {
    memset(e, 0, sizeof *e);
    const int n = m->n;
    const double b = (double)B / ((double)k->dp * k->micro_batches); /* micro-batch size */
    /* scratch on the stack for small models, else one allocation */
    enum { SMALL = 256 };
    oari_place place_s[SMALL];
    lay_cost lc_s[SMALL];
    int8_t from_s[2 * SMALL];
    double t_s[SMALL];
    int first_s[SMALL + 1];
    size_t bytes = (size_t)n * (sizeof(oari_place) + sizeof(lay_cost) + 2 + sizeof(double) + sizeof(int)) + sizeof(int);
    char *heap = n > SMALL ? oari_malloc(bytes) : NULL;
    oari_place *place = place_s;
    lay_cost *lc = lc_s;
    int8_t *from = from_s;
    double *t = t_s;
    int *first = first_s;
    if (n > SMALL) {
        if (!heap) { /* out of memory: an estimate that never wins */
            e->step_time = e->mem = HUGE_VAL;
            return;
        }
        char *p = heap;
        lc = (lay_cost *)p, p += (size_t)n * sizeof(lay_cost);
        t = (double *)p, p += (size_t)n * sizeof(double);
        place = (oari_place *)p, p += (size_t)n * sizeof(oari_place);
        first = (int *)p, p += (size_t)(n + 1) * sizeof(int);
        from = (int8_t *)p;
    }
    place_layers(m, c, k->tp, b, k->recompute, mem_first, hot, place, lc, from);
    double total_t = 0;
    for (int i = 0; i < n; i++) t[i] = lc[i].t, total_t += t[i];
    double stage_t = split_stages(t, n, k->pp, first);

    /* memory: the fullest stage */
    const double pb = m->param_bytes, gb = m->param_bytes;
    const double ob = m->param_bytes == 2 ? 12 : 8; /* Adam m, v (+ f32 master copy under mixed precision) */
    double worst_mem = -1, best_tc = 0, stage_params_max = 0, stage_fwd = 0, stage_bwd = 0;
    for (int s = 0; s < k->pp; s++) {
        double P = 0, act = 0, ckpt = 0, act_max = 0, layer_p_max = 0, tc = 0;
        for (int i = first[s]; i < first[s + 1]; i++) {
            P += lc[i].p;
            act += lc[i].act;
            ckpt += m->layers[i].in_bytes;
            act_max = lc[i].act > act_max ? lc[i].act : act_max;
            layer_p_max = lc[i].p > layer_p_max ? lc[i].p : layer_p_max;
            tc += lc[i].tc;
        }
        /* micro-batches in flight at stage s under 1F1B */
        int inflight = k->pp - s < k->micro_batches ? k->pp - s : k->micro_batches;
        double mp = P * pb, mg = P * gb, mo = P * ob;
        if (k->zero >= 1) mo /= k->dp;
        if (k->zero >= 2) mg /= k->dp;
        if (k->zero >= 3) mp = mp / k->dp + layer_p_max * pb; /* one layer gathered at a time */
        double ma = k->recompute ? inflight * b * ckpt + b * act_max : inflight * b * act;
        double mem = mp + mg + mo + ma;
        if (mem > worst_mem) {
            worst_mem = mem;
            e->mem_params = mp, e->mem_grads = mg, e->mem_optim = mo, e->mem_act = ma;
        }
        if (P > stage_params_max) {
            stage_params_max = P, best_tc = tc, stage_fwd = 0, stage_bwd = 0;
            for (int i = first[s]; i < first[s + 1]; i++) stage_fwd += lc[i].fwd, stage_bwd += lc[i].bwd;
        }
    }
    e->mem = worst_mem;
    e->fits = e->mem <= c->mem_bytes;
    /* oar's ZeRO (src/optim/zero.c) takes parameters replicated on the data-parallel mesh: not
     * tensor-parallel shards, not a pipeline stage's; ZeRO-3 is not wired into this recipe */
    e->runnable = k->zero == 0 || (k->zero <= 2 && k->tp == 1 && k->pp == 1);

    /* time: the pipeline's steady state, its bubble and sends */
    const int M = k->micro_batches;
    e->compute_time = M * (stage_t - best_tc);
    e->tp_comm_time = M * best_tc;
    if (k->pp > 1) {
        double send = 0;
        for (int s = 0; s + 1 < k->pp; s++) {
            double by = m->layers[first[s + 1] - 1].out_bytes * b;
            bool across = (double)k->dp * k->tp >= c->devices_per_node && c->n_devices > c->devices_per_node;
            double one = (across ? c->inter_lat : c->intra_lat) + by / (across ? c->inter_bw : c->intra_bw);
            send = one > send ? one : send;
        }
        /* 1F1B over stages of times t_s: the first micro-batch's pass through every stage and
         * the slowest stage's M - 1 others, sum t_s + (M - 1) max t_s (equal stages: the
         * familiar (M + pp - 1) t): the bubble is the other stages' time, not pp - 1 of the
         * slowest's */
        e->pp_time = fmax(0, total_t - stage_t) + 2.0 * (M + k->pp - 1) * send;
    }
    /* data parallel: the gradients of the fullest stage */
    double G = stage_params_max * gb;
    if (k->dp > 1) {
        /* each collective after the compute before it: a micro-batch's backward (gradients),
         * its forward (the loss, parameters gathered for ZeRO-3), the optimizer (ZeRO-2's
         * all-gather of the updated parameters) */
        double upd0 = stage_params_max / k->dp;
        double t_opt = upd0 * optim_per_param(c, hot);
        double ar = group_ar(c, G, k->dp, k->tp, stage_bwd), half = group_coll(c, G, k->dp, k->tp, 0.5, stage_bwd);
        /* as oar's ZeRO runs them (src/optim/zero.c): micro-batches accumulate into the full
         * .grad locally and the step communicates once: ZeRO-1 all-reduces the gradients,
         * ZeRO-2 reduce-scatters them; both all-gather the updated parameter shards */
        double gather = group_coll(c, stage_params_max * pb, k->dp, k->tp, 0.5, t_opt);
        if (k->zero == 0) e->dp_comm_time = ar;
        else if (k->zero == 1) e->dp_comm_time = ar + gather;
        else if (k->zero == 2) e->dp_comm_time = half + gather;
        else e->dp_comm_time = M * (half + 2 * group_coll(c, stage_params_max * pb, k->dp, k->tp, 0.5, stage_fwd));
        /* the loss of each micro-batch, read by every data-parallel rank after its forward: an
         * all-reduce of a scalar, a synchronisation per micro-batch */
        if (k->pp == 1) e->dp_comm_time += M * group_ar(c, 4, k->dp, k->tp, stage_fwd);
    }
    double upd = stage_params_max / (k->zero >= 1 ? k->dp : 1);
    e->optim_time = upd * optim_per_param(c, hot);
    /* gradient accumulation: each micro-batch after the first adds its gradients to .grad
     * (two reads, one write); the full gradients, ZeRO-1/2 included (they communicate once a
     * step), but under ZeRO-3 only this rank's shard */
    double acc = stage_params_max / (k->zero >= 3 ? k->dp : 1);
    e->accum_time = (M - 1) * acc * gb * 3 * stream_time_per_byte(c, hot);
    e->cache_fraction = hot;
    e->step_time = e->compute_time + e->tp_comm_time + e->pp_time + e->dp_comm_time + e->optim_time +
                   e->accum_time;
    if (place_out) memcpy(place_out, place, (size_t)n * sizeof *place);
    for (int st = 0; stage_out && st < k->pp; st++)
        for (int i = first[st]; i < first[st + 1]; i++) stage_out[i] = st;
    *splits = false;
    for (int i = 0; i < n && !*splits; i++) *splits = place[i] != OARI_PLACE_REPLICATE;
    if (heap) oari_free(heap, bytes);
}

/* Placements by time first; where that plan does not fit, or splits no
 * layer (its ranks would repeat each other's work), by memory first
 * (splitting wherever a layer can), which then wins if it fits or needs
 * less. */
static void estimate_placed(const oar_plan_model *m, const oar_cluster *c, int64_t B, const oar_plan_config *k,
                            double hot, oar_plan_estimate *e, oari_place *place_out, int *stage_out) {
    bool splits, splits2;
    estimate_with(m, c, B, k, false, hot, e, place_out, stage_out, &splits);
    if (k->tp == 1 || !isfinite(e->step_time) || (e->fits && splits)) return;
    oar_plan_estimate e2;
    estimate_with(m, c, B, k, true, hot, &e2, NULL, NULL, &splits2);
    if (!isfinite(e2.step_time)) return;
    if ((!splits && splits2 && (e2.fits || !e->fits)) || (!e->fits && (e2.fits || e2.mem < e->mem))) {
        *e = e2;
        if (place_out || stage_out) estimate_with(m, c, B, k, true, hot, &e2, place_out, stage_out, &splits2);
    }
}

/* Priced with everything in cache first; the memory per rank that gives times the ranks
 * sharing a node's cache is the working set (priced again, a tensor-parallel layout may move
 * with the slower GEMMs, its memory with it: the set of the warm layout is kept), and the part of it
 * the cache holds between two passes, h = 1 / (1 + (set / cache)^4), warm: a half at the
 * effective cache (as calibrated: where Adam's time is halfway to the cold one), 94% at half
 * of it, 6% at twice: a cache's curve, not a cliff, so that the planner's choice moves
 * smoothly with the set. */
void oari_plan_estimate(const oar_plan_model *m, const oar_cluster *c, int64_t B, const oar_plan_config *k,
                        oar_plan_estimate *e, oari_place *place_out, int *stage_out) {
    const bool cold = c->cache_bytes > 0;
    estimate_placed(m, c, B, k, 1, e, cold ? NULL : place_out, cold ? NULL : stage_out);
    if (!cold || !isfinite(e->step_time)) return;
    int sharing = c->n_devices < c->devices_per_node ? c->n_devices : c->devices_per_node;
    double set = e->mem * sharing, hot = 1 / (1 + pow(set / c->cache_bytes, 4));
    estimate_placed(m, c, B, k, hot, e, place_out, stage_out);
}

int oar_plan_estimate_config(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                             const oar_plan_config *cfg, oar_plan_estimate *out) {
    const char *fn = "oar_plan_estimate_config";
    if (!m) return oari_null_arg(fn, "model");
    if (!c) return oari_null_arg(fn, "cluster");
    if (!cfg) return oari_null_arg(fn, "configuration");
    if (!out) return oari_null_arg(fn, "out");
    int st = oar_cluster_check(c);
    if (st) return st;
    if (m->n == 0) return oari_error(OAR_ERR_INVALID, "%s: model %s has no layers", fn, m->name);
    if (global_batch <= 0) return oari_error(OAR_ERR_INVALID, "%s: global batch %lld: must be > 0", fn,
                                             (long long)global_batch);
    char why[200];
    if (oari_plan_check_config(m, c, global_batch, cfg, why, sizeof why))
        return oari_error(OAR_ERR_INVALID, "%s: %s", fn, why);
    oari_plan_estimate(m, c, global_batch, cfg, out, NULL, NULL);
    return isfinite(out->step_time) ? 0 : oari_nomem("plan estimate scratch");
}

int oar_plan_estimate_layout(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                             const oar_plan_config *cfg, int n, const char **place, int *stage) {
    const char *fn = "oar_plan_estimate_layout";
    oar_plan_estimate e;
    if (m && n != m->n)
        return oari_error(OAR_ERR_INVALID, "%s: n %d: must be the model's %d layers", fn, n, m->n);
    int st = oar_plan_estimate_config(m, c, global_batch, cfg, &e);
    if (st) return st;
    oari_place *pl = oari_calloc((size_t)n, sizeof *pl);
    int *sg = oari_calloc((size_t)n, sizeof *sg);
    if (!pl || !sg) {
        oari_free(pl, pl ? (size_t)n * sizeof *pl : 0);
        oari_free(sg, sg ? (size_t)n * sizeof *sg : 0);
        return oari_fail_status();
    }
    oari_plan_estimate(m, c, global_batch, cfg, &e, pl, sg);
    for (int i = 0; i < n; i++) {
        if (place) place[i] = oari_place_name(pl[i]);
        if (stage) stage[i] = sg[i];
    }
    oari_free(pl, (size_t)n * sizeof *pl);
    oari_free(sg, (size_t)n * sizeof *sg);
    return isfinite(e.step_time) ? 0 : oari_nomem("plan estimate scratch");
}

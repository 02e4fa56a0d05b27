/* The planner's search: every dp x tp x pp x ZeRO x micro-batches x
 * recompute point, pruned by memory, ranked by predicted step time; the
 * best of each family (dp, tp, pp, ZeRO) is kept for the runners-up, and
 * a family none of whose points fits is reported with the reason
 * (docs/internals/plan.md, "The search"). */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ranked {
    oar_plan_config cfg;
    oar_plan_estimate est;
} ranked;

struct oar_plan_result {
    ranked *plans; /* best first; one per family */
    int n_plans, cap_plans;
    int n_ranked;  /* plans kept for the caller: chosen + runners-up */
    char **pruned;
    int n_pruned, cap_pruned;
    oari_place *place; /* the chosen plan's, one per layer */
    char **layer_names; /* borrowed from the model? no: copied, so the result outlives it */
    int n_layers;
    int64_t evaluated;
    int64_t global_batch;
    int n_devices;
    double mem_bytes;
    char *model_name;
};

void oar_plan_result_free(oar_plan_result *r) {
    if (!r) return;
    oari_free(r->plans, (size_t)r->cap_plans * sizeof *r->plans);
    for (int i = 0; i < r->n_pruned; i++) oari_strfree(r->pruned[i]);
    oari_free(r->pruned, (size_t)r->cap_pruned * sizeof *r->pruned);
    oari_free(r->place, (size_t)r->n_layers * sizeof *r->place);
    for (int i = 0; r->layer_names && i < r->n_layers; i++) oari_strfree(r->layer_names[i]);
    oari_free(r->layer_names, (size_t)r->n_layers * sizeof *r->layer_names);
    oari_strfree(r->model_name);
    oari_free(r, sizeof *r);
}

static int add_plan(oar_plan_result *r, const oar_plan_config *k, const oar_plan_estimate *e) {
    if (r->n_plans == r->cap_plans) {
        int cap = r->cap_plans ? 2 * r->cap_plans : 64;
        ranked *p = oari_realloc(r->plans, (size_t)r->cap_plans * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) return oari_fail_status();
        r->plans = p, r->cap_plans = cap;
    }
    r->plans[r->n_plans++] = (ranked){*k, *e};
    return 0;
}

static int add_pruned(oar_plan_result *r, const char *text) {
    if (r->n_pruned == r->cap_pruned) {
        int cap = r->cap_pruned ? 2 * r->cap_pruned : 32;
        char **p = oari_realloc(r->pruned, (size_t)r->cap_pruned * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) return oari_fail_status();
        r->pruned = p, r->cap_pruned = cap;
    }
    if (!(r->pruned[r->n_pruned] = oari_strdup(text))) return oari_fail_status();
    r->n_pruned++;
    return 0;
}

static int by_time(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->est.step_time != y->est.step_time) return x->est.step_time < y->est.step_time ? -1 : 1;
    return x->est.mem < y->est.mem ? -1 : x->est.mem > y->est.mem;
}

#define GIB (1024.0 * 1024.0 * 1024.0)

/* bytes as "12.3 GiB", "31.6 KiB" into buf (>= 32 bytes). */
static const char *size_str(double bytes, char *buf) {
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (i < 4 && fabs(bytes) >= 1024) bytes /= 1024, i++;
    snprintf(buf, 32, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
    return buf;
}

oar_plan_result *oar_plan_parallel(const oar_plan_model *m, const oar_cluster *c, const oar_plan_options *opt) {
    const char *fn = "oar_plan_parallel";
    if (!m) return oari_null_arg(fn, "model"), NULL;
    if (!c) return oari_null_arg(fn, "cluster"), NULL;
    if (!opt) return oari_null_arg(fn, "options"), NULL;
    if (oar_cluster_check(c)) return NULL;
    if (m->n == 0) return oari_error(OAR_ERR_INVALID, "%s: model %s has no layers", fn, m->name), NULL;
    if (opt->global_batch <= 0)
        return oari_error(OAR_ERR_INVALID, "%s: global batch %lld: must be > 0", fn, (long long)opt->global_batch),
               NULL;
    if (opt->runners_up < 0 || opt->max_micro_batches < 0)
        return oari_error(OAR_ERR_INVALID, "%s: runners_up %d and max_micro_batches %d must be >= 0", fn,
                          opt->runners_up, opt->max_micro_batches), NULL;
    const int N = c->n_devices, maxm = opt->max_micro_batches ? opt->max_micro_batches : 64;
    const int64_t B = opt->global_batch;
    oar_plan_result *r = oari_calloc(1, sizeof *r);
    if (!r) return NULL;
    r->global_batch = B, r->n_devices = N, r->mem_bytes = c->mem_bytes;
    oari_place *pl = NULL; /* each evaluated plan's placements */
    if (!(r->model_name = oari_strdup(m->name)) || !(pl = oari_calloc((size_t)m->n, sizeof *pl))) goto fail;
    double least_mem = HUGE_VAL;
    oar_plan_config least_cfg = {0};
    for (int tp = 1; tp <= N; tp++) {
        if (N % tp) continue;
        for (int pp = 1; pp <= N / tp; pp++) {
            if ((N / tp) % pp) continue;
            int dp = N / tp / pp;
            for (int z = 0; z <= 3; z++) {
                if (z > 0 && dp == 1) continue;
                if (opt->runnable_only && z > 0 && (z > 2 || tp > 1 || pp > 1)) continue;
                char fam[64];
                snprintf(fam, sizeof fam, "dp %d tp %d pp %d zero %d", dp, tp, pp, z);
                oar_plan_config best = {0};
                oar_plan_estimate best_e = {.step_time = HUGE_VAL};
                oar_plan_estimate small_e = {.mem = HUGE_VAL};
                char why[200] = "";
                bool any_valid = false;
                for (int mb = 1; mb <= maxm; mb++) {
                    for (int rc = 0; rc <= 1; rc++) {
                        oar_plan_config k = {dp, tp, pp, z, mb, rc};
                        char w[200];
                        if (oari_plan_check_config(m, c, B, &k, w, sizeof w)) {
                            if (!why[0]) snprintf(why, sizeof why, "%s", w);
                            continue;
                        }
                        oar_plan_estimate e;
                        oari_plan_estimate(m, c, B, &k, &e, pl, NULL);
                        r->evaluated++;
                        /* tensor parallel with every layer replicated: ranks idle, as tp 1 on fewer devices */
                        bool splits = tp == 1;
                        for (int i = 0; i < m->n && !splits; i++) splits = pl[i] != OARI_PLACE_REPLICATE;
                        if (!splits) {
                            if (!why[0])
                                snprintf(why, sizeof why, "tp %d: no layer is worth splitting (every placement "
                                         "replicate): the ranks would repeat each other's work", tp);
                            continue;
                        }
                        any_valid = true;
                        if (!isfinite(e.step_time)) {
                            oari_nomem("plan estimate scratch");
                            goto fail;
                        }
                        if (e.mem < small_e.mem) small_e = e;
                        if (e.mem < least_mem) least_mem = e.mem, least_cfg = k;
                        if (e.fits && e.step_time < best_e.step_time) best = k, best_e = e;
                    }
                }
                char text[400];
                if (isfinite(best_e.step_time)) {
                    if (add_plan(r, &best, &best_e)) goto fail;
                    continue;
                }
                if (!any_valid)
                    snprintf(text, sizeof text, "%s: %s", fam, why);
                else {
                    char s0[32], s1[32], s2[32], s3[32], s4[32], s5[32];
                    snprintf(text, sizeof text, "%s: memory: needs %s per rank at least (params %s, grads %s, "
                             "optimizer %s, activations %s), %s available", fam, size_str(small_e.mem, s0),
                             size_str(small_e.mem_params, s1), size_str(small_e.mem_grads, s2),
                             size_str(small_e.mem_optim, s3), size_str(small_e.mem_act, s4),
                             size_str(c->mem_bytes, s5));
                }
                if (add_pruned(r, text)) goto fail;
            }
        }
    }
    if (r->n_plans == 0) {
        char s0[32], s1[32];
        if (isfinite(least_mem))
            oari_error(OAR_ERR_INVALID, "%s: no plan fits in %s per device: the least memory any plan "
                       "needs is %s per rank (dp %d tp %d pp %d zero %d, %d micro-batches%s); add "
                       "devices or memory, or shrink the model or batch", fn, size_str(c->mem_bytes, s0),
                       size_str(least_mem, s1),
                       least_cfg.dp, least_cfg.tp, least_cfg.pp, least_cfg.zero, least_cfg.micro_batches,
                       least_cfg.recompute ? ", recompute" : "");
        else
            oari_error(OAR_ERR_INVALID, "%s: no valid plan for %d devices at batch %lld: %s", fn, N,
                       (long long)B, r->n_pruned ? r->pruned[0] : "none");
        goto fail;
    }
    oari_free(pl, (size_t)m->n * sizeof *pl);
    pl = NULL;
    qsort(r->plans, (size_t)r->n_plans, sizeof *r->plans, by_time);
    int keep = 1 + (opt->runners_up ? opt->runners_up : 5);
    r->n_ranked = r->n_plans < keep ? r->n_plans : keep;
    r->n_layers = m->n;
    if (!(r->place = oari_calloc((size_t)m->n, sizeof *r->place)) ||
        !(r->layer_names = oari_calloc((size_t)m->n, sizeof *r->layer_names)))
        goto fail;
    for (int i = 0; i < m->n; i++)
        if (!(r->layer_names[i] = oari_strdup(m->layers[i].name))) goto fail;
    oar_plan_estimate e;
    oari_plan_estimate(m, c, B, &r->plans[0].cfg, &e, r->place, NULL);
    return r;
fail:
    if (pl) oari_free(pl, (size_t)m->n * sizeof *pl);
    oar_plan_result_free(r);
    return NULL;
}

int oar_plan_result_count(const oar_plan_result *r) {
    return r ? r->n_ranked : oari_null_arg("oar_plan_result_count", "result");
}

const oar_plan_config *oar_plan_result_config(const oar_plan_result *r, int i, oar_plan_estimate *est) {
    if (!r) return oari_null_arg("oar_plan_result_config", "result"), NULL;
    if (i < 0 || i >= r->n_ranked) {
        oari_error(OAR_ERR_INVALID, "oar_plan_result_config: plan %d of %d", i, r->n_ranked);
        return NULL;
    }
    if (est) *est = r->plans[i].est;
    return &r->plans[i].cfg;
}

const char *oar_plan_result_placement(const oar_plan_result *r, int layer) {
    if (!r) return oari_null_arg("oar_plan_result_placement", "result"), NULL;
    if (layer < 0 || layer >= r->n_layers) {
        oari_error(OAR_ERR_INVALID, "oar_plan_result_placement: layer %d of %d", layer, r->n_layers);
        return NULL;
    }
    return oari_place_name(r->place[layer]);
}

int oar_plan_result_num_pruned(const oar_plan_result *r) {
    return r ? r->n_pruned : oari_null_arg("oar_plan_result_num_pruned", "result");
}

const char *oar_plan_result_pruned(const oar_plan_result *r, int i) {
    if (!r) return oari_null_arg("oar_plan_result_pruned", "result"), NULL;
    if (i < 0 || i >= r->n_pruned) {
        oari_error(OAR_ERR_INVALID, "oar_plan_result_pruned: %d of %d", i, r->n_pruned);
        return NULL;
    }
    return r->pruned[i];
}

int64_t oar_plan_result_evaluated(const oar_plan_result *r) {
    return r ? r->evaluated : oari_null_arg("oar_plan_result_evaluated", "result");
}

static void print_plan(FILE *f, const char *tag, const ranked *p) {
    const oar_plan_config *k = &p->cfg;
    const oar_plan_estimate *e = &p->est;
    char s0[32];
    fprintf(f, "%-9s dp %4d tp %2d pp %3d zero %d  micro-batches %3d  recompute %-3s  step %10.4g s  "
            "mem/rank %10s%s\n", tag, k->dp, k->tp, k->pp, k->zero, k->micro_batches, k->recompute ? "on" : "off",
            e->step_time, size_str(e->mem, s0),
            e->runnable ? "" : "  (predicted only: oar runs ZeRO 1/2 with data parallelism alone)");
}

int oar_plan_result_print(const oar_plan_result *r, FILE *f) {
    if (!r) return oari_null_arg("oar_plan_result_print", "result");
    if (!f) return oari_null_arg("oar_plan_result_print", "file");
    char s0[32], s1[32], s2[32], s3[32];
    fprintf(f, "plan for %s on %d devices (%s each), global batch %lld: %lld configurations evaluated\n",
            r->model_name, r->n_devices, size_str(r->mem_bytes, s0), (long long)r->global_batch,
            (long long)r->evaluated);
    print_plan(f, "chosen", &r->plans[0]);
    const oar_plan_estimate *e = &r->plans[0].est;
    fprintf(f, "  time: compute %.4g s, tensor-parallel comm %.4g s, pipeline bubble+sends %.4g s, "
            "data-parallel comm %.4g s, optimizer %.4g s, gradient accumulation %.4g s\n", e->compute_time,
            e->tp_comm_time, e->pp_time, e->dp_comm_time, e->optim_time, e->accum_time);
    if (e->cache_fraction < 1)
        fprintf(f, "  the node's cache holds %.0f%% of its working set: the rest streams from memory\n",
                100 * e->cache_fraction);
    fprintf(f, "  memory per rank: params %s, grads %s, optimizer %s, activations %s\n", size_str(e->mem_params, s0),
            size_str(e->mem_grads, s1), size_str(e->mem_optim, s2), size_str(e->mem_act, s3));
    if (r->plans[0].cfg.tp > 1) {
        fprintf(f, "  placements (tp %d):", r->plans[0].cfg.tp);
        /* runs of the same placement, so 96-layer models stay readable */
        for (int i = 0; i < r->n_layers;) {
            int j = i;
            while (j + 1 < r->n_layers && r->place[j + 1] == r->place[i]) j++;
            if (j == i) fprintf(f, " %s=%s", r->layer_names[i], oari_place_name(r->place[i]));
            else fprintf(f, " %s..%s=%s", r->layer_names[i], r->layer_names[j], oari_place_name(r->place[i]));
            i = j + 1;
        }
        fputc('\n', f);
    }
    for (int i = 1; i < r->n_ranked; i++) print_plan(f, "runner-up", &r->plans[i]);
    if (r->n_pruned) fprintf(f, "pruned families (%d):\n", r->n_pruned);
    for (int i = 0; i < r->n_pruned; i++) fprintf(f, "  %s\n", r->pruned[i]);
    return ferror(f) ? oari_error(OAR_ERR_IO, "oar_plan_result_print: write failed") : 0;
}

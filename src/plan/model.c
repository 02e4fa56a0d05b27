/* The planner's model: per-layer cost records, added by hand, read off a
 * traced graph, or made from a transformer's configuration
 * (docs/internals/plan.md, "The model"). */
#include "plan.h"
#include "../graph/ir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

oar_plan_model *oar_plan_model_new(const char *name, int param_bytes) {
    if (param_bytes != 2 && param_bytes != 4) {
        oari_error(OAR_ERR_INVALID, "oar_plan_model_new: param_bytes %d: must be 4 (f32) or 2 (bf16 mixed precision)",
                   param_bytes);
        return NULL;
    }
    oar_plan_model *m = oari_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->param_bytes = param_bytes;
    if (!(m->name = oari_strdup(name ? name : "model"))) {
        oari_free(m, sizeof *m);
        return NULL;
    }
    return m;
}

void oar_plan_model_free(oar_plan_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) oari_strfree((char *)m->layers[i].name);
    oari_free(m->layers, (size_t)m->cap * sizeof *m->layers);
    oari_strfree(m->name);
    oari_free(m, sizeof *m);
}

static bool bad_num(double x) { return !isfinite(x) || x < 0; }

int oar_plan_model_add_layer(oar_plan_model *m, const oar_plan_layer *l) {
    if (!m) return oari_null_arg("oar_plan_model_add_layer", "model");
    if (!l) return oari_null_arg("oar_plan_model_add_layer", "layer");
    const char *nm = l->name ? l->name : "layer";
    if ((unsigned)l->kind > OAR_PLAN_LAYER_BLOCK)
        return oari_error(OAR_ERR_INVALID, "oar_plan_model_add_layer: %s: kind %d is not an oar_plan_layer_kind", nm,
                          (int)l->kind);
    const double f[] = {l->flops, l->bytes, l->params, l->act_bytes, l->in_bytes, l->out_bytes};
    static const char *const fn[] = {"flops", "bytes", "params", "act_bytes", "in_bytes", "out_bytes"};
    for (int i = 0; i < 6; i++)
        if (bad_num(f[i]))
            return oari_error(OAR_ERR_INVALID, "oar_plan_model_add_layer: %s: %s %g must be finite and >= 0", nm,
                              fn[i], f[i]);
    double fam = 0;
    for (int i = 0; i < OAR_PLAN_OP_FAMILIES; i++) {
        if (bad_num(l->family_bytes[i]))
            return oari_error(OAR_ERR_INVALID, "oar_plan_model_add_layer: %s: family_bytes[%d] %g must be finite "
                              "and >= 0", nm, i, l->family_bytes[i]);
        fam += l->family_bytes[i];
    }
    if (fam > l->bytes * (1 + 1e-9))
        return oari_error(OAR_ERR_INVALID, "oar_plan_model_add_layer: %s: family_bytes sum to %g, more than its "
                          "%g bytes", nm, fam, l->bytes);
    if (l->n_ops < 0 || l->tp_max < 0)
        return oari_error(OAR_ERR_INVALID, "oar_plan_model_add_layer: %s: n_ops %d and tp_max %d must be >= 0", nm,
                          l->n_ops, l->tp_max);
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        oar_plan_layer *p = oari_realloc(m->layers, (size_t)m->cap * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) return oari_fail_status();
        m->layers = p;
        m->cap = cap;
    }
    char buf[32];
    if (!l->name) snprintf(buf, sizeof buf, "layer%d", m->n);
    char *name = oari_strdup(l->name ? l->name : buf);
    if (!name) return oari_fail_status();
    m->layers[m->n] = *l;
    m->layers[m->n].name = name;
    m->n++;
    return 0;
}

int oar_plan_model_num_layers(const oar_plan_model *m) {
    return m ? m->n : oari_null_arg("oar_plan_model_num_layers", "model");
}

const oar_plan_layer *oar_plan_model_layer(const oar_plan_model *m, int i) {
    if (!m) return oari_null_arg("oar_plan_model_layer", "model"), NULL;
    if (i < 0 || i >= m->n) {
        oari_error(OAR_ERR_INVALID, "oar_plan_model_layer: layer %d of %d", i, m->n);
        return NULL;
    }
    return &m->layers[i];
}

double oar_plan_model_params(const oar_plan_model *m) {
    if (!m) return oari_null_arg("oar_plan_model_params", "model"), -1;
    double p = 0;
    for (int i = 0; i < m->n; i++) p += m->layers[i].params;
    return p;
}

const char *oar_plan_model_name(const oar_plan_model *m) {
    return m ? m->name : (oari_null_arg("oar_plan_model_name", "model"), NULL);
}

/* ---- from a traced graph ------------------------------------------------ */

static double numel(const oari_gvalue *v) {
    double n = 1;
    for (int d = 0; d < v->ndim; d++) n *= (double)v->shape[d];
    return n;
}
static double vbytes(const oari_gvalue *v) { return numel(v) * (double)oar_dtype_size(v->dtype); }

/* The oar_plan_op_family of a memory-bound op; -1: plain (at the elementwise rate). */
static int op_family(oari_op op) {
    switch (op) {
    case OARI_OP_exp: case OARI_OP_exp2: case OARI_OP_log: case OARI_OP_log2: case OARI_OP_log1p:
    case OARI_OP_expm1: case OARI_OP_sin: case OARI_OP_cos: case OARI_OP_tan: case OARI_OP_asin:
    case OARI_OP_acos: case OARI_OP_atan: case OARI_OP_sinh: case OARI_OP_cosh: case OARI_OP_tanh:
    case OARI_OP_sigmoid: case OARI_OP_elu: case OARI_OP_gelu: case OARI_OP_silu: case OARI_OP_softplus:
    case OARI_OP_erf: case OARI_OP_pow: case OARI_OP_atan2:
        return OAR_PLAN_FAMILY_TRANSCENDENTAL;
    case OARI_OP_layer_norm: case OARI_OP_group_norm: case OARI_OP_batch_norm:
    case OARI_OP_batch_norm_backward: case OARI_OP_layer_norm_backward:
        return OAR_PLAN_FAMILY_NORM;
    case OARI_OP_softmax: case OARI_OP_log_softmax:
        return OAR_PLAN_FAMILY_SOFTMAX;
    case OARI_OP_where:
        return OAR_PLAN_FAMILY_SELECT;
    default:
        return -1;
    }
}

/* A parameter: a named constant or input from a module's state ("fc1.weight"). */
static bool is_param(const oari_gvalue *v) {
    return (v->kind == OARI_V_CONST || v->kind == OARI_V_INPUT) && v->name && strchr(v->name, '.');
}

oar_plan_model *oar_plan_model_from_graph(const oar_graph *g, int64_t batch) {
    if (!g) return oari_null_arg("oar_plan_model_from_graph", "graph"), NULL;
    if (batch <= 0) {
        if (g->n_inputs < 1 || g->values[g->inputs[0]].ndim < 1 || g->values[g->inputs[0]].shape[0] <= 0) {
            oari_error(OAR_ERR_INVALID, "oar_plan_model_from_graph: batch %lld and the graph has no input with a "
                       "batch dim to read it from; pass the traced batch size", (long long)batch);
            return NULL;
        }
        batch = g->values[g->inputs[0]].shape[0];
    }
    oar_plan_model *m = oar_plan_model_new("graph", 4);
    if (!m) return NULL;
    /* seen[v]: bit 0 a parameter already counted; bit 1 a value made from parameters only
     * (a transposed weight) */
    uint8_t *seen = oari_calloc((size_t)g->n_values + 1, 1);
    /* node_layer[i]: the index of the layer node i joined (residual adds: an operand from before) */
    int *node_layer = oari_calloc((size_t)g->n_nodes + 1, sizeof *node_layer);
    if (!seen || !node_layer) {
        oari_free(seen, seen ? (size_t)g->n_values + 1 : 0);
        oari_free(node_layer, node_layer ? ((size_t)g->n_nodes + 1) * sizeof *node_layer : 0);
        return oar_plan_model_free(m), NULL;
    }
    bool have_in = false;
    oar_plan_layer cur = {0};
    char curname[128] = "";
    bool open = false, cur_mm = false, cur_pointwise = true, cur_actmm = false, cur_residual = false;
    double wf = 0, wrows = 0, wk = 0, wn = 0; /* the layer's weight GEMMs: FLOPs, and FLOP-weighted dims */
    const double B = (double)batch;
    int st = 0;
    for (int i = 0; i <= g->n_nodes && !st; i++) {
        const oari_gnode *n = i < g->n_nodes ? &g->nodes[i] : NULL;
        if (n && n->dead) continue;
        /* the parameter this node reads, if any: a new layer when its prefix differs */
        const char *pname = NULL;
        for (int k = 0; n && k < n->n_in && !pname; k++)
            if (n->in[k] >= 0 && is_param(&g->values[n->in[k]])) pname = g->values[n->in[k]].name;
        char prefix[128] = "";
        if (pname) {
            const char *dot = strrchr(pname, '.');
            size_t len = (size_t)(dot - pname) < sizeof prefix - 1 ? (size_t)(dot - pname) : sizeof prefix - 1;
            memcpy(prefix, pname, len);
            prefix[len] = 0;
        }
        if (open && (!n || (pname && strcmp(prefix, curname)))) {
            /* a layer with a product of two activations too (attention's scores) is not one
             * weight GEMM: splitting its weight's features would split what that product needs
             * whole (the heads are not known here), so it stays replicated */
            cur.kind = cur_mm && !cur_actmm ? OAR_PLAN_LAYER_LINEAR
                       : cur_pointwise && !cur_mm ? OAR_PLAN_LAYER_POINTWISE : OAR_PLAN_LAYER_REPLICATED;
            cur.name = curname;
            cur.residual = cur.kind == OAR_PLAN_LAYER_LINEAR && cur_residual;
            if (wf > 0) cur.gemm_rows = wrows / wf, cur.gemm_k = wk / wf, cur.gemm_n = wn / wf;
            st = oar_plan_model_add_layer(m, &cur);
            open = false;
        }
        if (!n || st) break;
        if (!open) {
            memset(&cur, 0, sizeof cur);
            wf = wrows = wk = wn = 0;
            snprintf(curname, sizeof curname, "%s", pname ? prefix : (m->n ? "tail" : "input"));
            cur_mm = false, cur_actmm = false, cur_residual = false;
            cur_pointwise = true;
            open = true;
            have_in = false;
        }
        const oari_op_def *def = oari_gnode_def(n);
        node_layer[i] = m->n;
        double inb = 0, outb = 0;
        bool from_params = n->n_in > 0, reads_param = false;
        int acts = 0, acts_before = 0; /* activation operands; of them, made before this layer */
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            const oari_gvalue *v = &g->values[n->in[k]];
            if (!is_param(v) && !(seen[n->in[k]] & 2) && v->kind != OARI_V_CONST) {
                acts++;
                acts_before += v->kind != OARI_V_NODE || node_layer[v->producer] != m->n;
            }
            if (is_param(v)) {
                if (!(seen[n->in[k]] & 1)) cur.params += numel(v);
                seen[n->in[k]] |= 1;
                reads_param = true;
            } else if (seen[n->in[k]] & 2) {
                reads_param = true;
            } else {
                from_params = false;
                inb += vbytes(v);
                if (!have_in && v->kind != OARI_V_CONST) cur.in_bytes = vbytes(v) / B, have_in = true;
            }
        }
        if (from_params)
            for (int k = 0; k < n->n_out; k++) seen[n->out[k]] |= 2;
        for (int k = 0; k < n->n_out; k++) outb += vbytes(&g->values[n->out[k]]);
        bool view = def->flags & OARI_F_VIEW;
        if (n->op == OARI_OP_matmul && n->n_in >= 2) {
            const oari_gvalue *a = &g->values[n->in[0]];
            double K = a->ndim ? (double)a->shape[a->ndim - 1] : 1;
            double fl = 2.0 * numel(&g->values[n->out[0]]) * K / B;
            cur.flops += fl;
            if (reads_param) {
                const oari_gvalue *w = &g->values[n->in[1]];
                double N = w->ndim ? (double)w->shape[w->ndim - 1] : 1;
                cur_mm = true;
                wf += fl, wrows += fl * numel(a) / (K > 0 ? K : 1) / B, wk += fl * K, wn += fl * N;
            } else {
                cur_pointwise = false, cur_actmm = true;
            }
        } else if (n->op == OARI_OP_conv2d && n->n_in >= 2) {
            const oari_gvalue *w = &g->values[n->in[1]];
            double per = 1;
            for (int d = 1; d < w->ndim; d++) per *= (double)w->shape[d];
            cur.flops += 2.0 * numel(&g->values[n->out[0]]) * per / B;
            cur_pointwise = false;
        } else if (!view) {
            cur.bytes += (inb + outb) / B;
            int fam = op_family(n->op);
            if (fam >= 0) cur.family_bytes[fam] += (inb + outb) / B;
            bool pw = def->fusion == OARI_FUSE_ELEMWISE || def->fusion == OARI_FUSE_BROADCAST;
            if (!pw) cur_pointwise = false;
            /* after the weight GEMM, an elementwise op of its result and an activation made
             * before the layer: a residual add */
            if (pw && cur_mm && acts >= 2 && acts_before >= 1 && acts_before < acts) cur_residual = true;
        }
        if (from_params) continue; /* a weight's transpose: part of the parameter, not of the step */
        if (!view) {
            cur.n_ops++;
            cur.act_bytes += outb / B; /* every result kept for backward: an upper bound */
        }
        if (n->n_out > 0) cur.out_bytes = vbytes(&g->values[n->out[0]]) / B;
    }
    oari_free(seen, (size_t)g->n_values + 1);
    oari_free(node_layer, ((size_t)g->n_nodes + 1) * sizeof *node_layer);
    if (st) return oar_plan_model_free(m), NULL;
    return m;
}

/* ---- from a transformer's configuration ---------------------------------- */

oar_plan_model *oar_plan_model_transformer(const oar_plan_transformer *cfg) {
    if (!cfg) return oari_null_arg("oar_plan_model_transformer", "configuration"), NULL;
    if (cfg->layers <= 0 || cfg->d_model <= 0 || cfg->heads <= 0 || cfg->seq <= 0 || cfg->vocab <= 0 ||
        cfg->d_model % cfg->heads) {
        oari_error(OAR_ERR_INVALID, "oar_plan_model_transformer: layers %d, d_model %d, heads %d, seq %d, vocab %d: "
                   "each must be > 0 and heads must divide d_model", cfg->layers, cfg->d_model, cfg->heads, cfg->seq,
                   cfg->vocab);
        return NULL;
    }
    int pb = cfg->param_bytes ? cfg->param_bytes : 2;
    char name[96];
    snprintf(name, sizeof name, "transformer-L%d-d%d", cfg->layers, cfg->d_model);
    oar_plan_model *m = oar_plan_model_new(name, pb);
    if (!m) return NULL;
    const double s = cfg->seq, h = cfg->d_model, a = cfg->heads, V = cfg->vocab;
    const double act = s * h * pb; /* one [s, h] activation */
    /* Activation bytes per layer as Korthikanti et al. 2022 count them
     * (no sequence parallelism): attention 11sh + 5as^2 elements-bytes at
     * 2 bytes, MLP 19sh; scaled by pb / 2. */
    const double scale = pb / 2.0;
    oar_plan_layer emb = {.name = "embedding", .kind = OAR_PLAN_LAYER_BLOCK, .flops = 0, .bytes = 2 * act,
                          .n_ops = 3, .params = V * h + s * h, .act_bytes = act, .in_bytes = s * 8,
                          .out_bytes = act, .tp_max = 0};
    int st = oar_plan_model_add_layer(m, &emb);
    for (int l = 0; l < cfg->layers && !st; l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%d.attention", l);
        oar_plan_layer at = {.name = nm, .kind = OAR_PLAN_LAYER_BLOCK,
                             .flops = 8 * s * h * h + 4 * s * s * h, /* qkv + out proj, scores + values */
                             .bytes = 12 * act + 3 * a * s * s * pb, /* norm, bias, dropout, residual; softmax */
                             .n_ops = 14, .params = 4 * h * h + 4 * h + 2 * h,
                             .act_bytes = (11 * s * h + 5 * a * s * s) * scale, .in_bytes = act, .out_bytes = act,
                             .tp_max = cfg->heads};
        st = oar_plan_model_add_layer(m, &at);
        snprintf(nm, sizeof nm, "layers.%d.mlp", l);
        oar_plan_layer mlp = {.name = nm, .kind = OAR_PLAN_LAYER_BLOCK, .flops = 16 * s * h * h,
                              .bytes = 8 * act + 8 * act, /* norm, bias+gelu on 4h, dropout, residual */
                              .n_ops = 9, .params = 8 * h * h + 5 * h + 2 * h, .act_bytes = 19 * s * h * scale,
                              .in_bytes = act, .out_bytes = act, .tp_max = 0};
        if (!st) st = oar_plan_model_add_layer(m, &mlp);
    }
    oar_plan_layer head = {.name = "head", .kind = OAR_PLAN_LAYER_BLOCK, .flops = 2 * s * h * V,
                           .bytes = 4 * act + 3 * s * V * 4, .n_ops = 6, .params = 2 * h, /* tied to the embedding */
                           .act_bytes = 2 * act + s * V * 4, .in_bytes = act, .out_bytes = s * 4, .tp_max = 0};
    if (!st) st = oar_plan_model_add_layer(m, &head);
    if (st) return oar_plan_model_free(m), NULL;
    return m;
}

/* Static auto parallel (include/oar/graph.h, "static auto parallel";
 * docs/internals/dist.md): placements on a traced graph's values, their
 * completion over every node, the per-rank partition with explicit
 * collective nodes, and the per-rank saved model.
 *
 * Completion runs the dist layer's sharding rules (oari_shard_rule, the
 * ones eager dtensors use) over the nodes in order, on global metas: each
 * node's output placements are what the rule gives for its inputs'
 * placements (an op without a rule replicates). Partition walks the same
 * nodes again with the same rule: where the rule wants an input in other
 * placements than its producer gives, it appends collective nodes
 * (src/dist/collective_ops.c), one per mesh dim that changes; values get
 * this rank's local shapes and nodes the rule's local attributes. Graph
 * outputs are made Replicate, except "grad:x" and "next:x" (and
 * "next:adam_m:x" ...), which keep the placements of input x so that a
 * train step's updates feed back. */
#include "ir.h"
#include "../dist/dist.h"
#include "../ops/custom_op.h" /* oari_custom_of: a collective node's kind */
#include "../core/save.h"     /* oari_file_save, oari_make_dirs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the dist slot ------------------------------------------------------- */

void oari_gdist_free(void *d) { oari_free(d, sizeof(oari_gdist)); }

int oari_gdist_dup(const void *d, void **to) {
    *to = NULL;
    if (!d) return 0;
    oari_gdist *c = oari_malloc(sizeof *c);
    if (!c) return oari_fail_status();
    *c = *(const oari_gdist *)d;
    *to = c;
    return 0;
}

static const char *reduce_name(oar_reduce_op op) {
    switch (op) {
    case OAR_REDUCE_SUM:
        return "sum";
    case OAR_REDUCE_AVG:
        return "avg";
    case OAR_REDUCE_MAX:
        return "max";
    case OAR_REDUCE_MIN:
        return "min";
    case OAR_REDUCE_PROD:
        return "prod";
    }
    return "?";
}

void oari_gdist_print(const void *d, FILE *f) {
    const oari_gdist *gd = d;
    if (!gd) return;
    fputs(" [", f);
    for (int k = 0; k < gd->ndim; k++) {
        if (k) fputc(',', f);
        if (gd->p[k].kind == OAR_PLACEMENT_SHARD)
            fprintf(f, "S(%d)", gd->p[k].dim);
        else if (gd->p[k].kind == OAR_PLACEMENT_PARTIAL)
            fprintf(f, "P(%s)", reduce_name(gd->p[k].reduce));
        else
            fputc('R', f);
    }
    fputc(']', f);
}

static bool same_p(const oar_placement *a, const oar_placement *b, int nd) {
    for (int d = 0; d < nd; d++)
        if (a[d].kind != b[d].kind || (a[d].kind == OAR_PLACEMENT_SHARD && a[d].dim != b[d].dim) ||
            (a[d].kind == OAR_PLACEMENT_PARTIAL && a[d].reduce != b[d].reduce))
            return false;
    return true;
}

static int set_dist_as(oari_gvalue *v, const oar_mesh *m, const oar_placement *p, bool annotated) {
    oari_gdist gd = {.mesh = m->id, .ndim = m->ndim, .annotated = annotated};
    memcpy(gd.p, p, (size_t)m->ndim * sizeof *p);
    if (v->dist) {
        *(oari_gdist *)v->dist = gd;
        return 0;
    }
    return oari_gdist_dup(&gd, &v->dist);
}

static int set_dist(oari_gvalue *v, const oar_mesh *m, const oar_placement *p) {
    return set_dist_as(v, m, p, false);
}

/* ---- annotation ----------------------------------------------------------- */

/* The input or constant named `name` of g's top level, or -1. */
static int value_named(const oar_graph *g, const char *name) {
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].kind != OARI_V_NODE && g->values[v].name &&
            !strcmp(g->values[v].name, name))
            return v;
    return -1;
}

int oar_graph_annotate(oar_graph *g, const char *name, oar_mesh *mesh,
                       const oar_placement *placements) {
    if (!g || !name || !mesh || !placements)
        return oari_error(OAR_ERR_INVALID,
                          "graph_annotate: graph, name, mesh or placements is NULL");
    int v = value_named(g, name);
    if (v < 0)
        return oari_error(OAR_ERR_INVALID,
                          "graph_annotate: the graph has no input or constant named \"%s\"", name);
    oari_gvalue *gv = &g->values[v];
    bool used[OAR_MAX_DIMS] = {0};
    char buf[128];
    for (int d = 0; d < mesh->ndim; d++) {
        oar_placement p = placements[d];
        if (p.kind == OAR_PLACEMENT_REPLICATE) continue;
        if (p.kind != OAR_PLACEMENT_SHARD)
            return oari_error(OAR_ERR_INVALID,
                              "graph_annotate: \"%s\": mesh dim %d is %s; annotate "
                              "Shard or Replicate (Partial values come from ops)",
                              name, d,
                              p.kind == OAR_PLACEMENT_PARTIAL ? "Partial" : "not a placement");
        if (p.dim < 0 || p.dim >= gv->ndim || used[p.dim] || gv->sym[p.dim] >= 0)
            return oari_error(OAR_ERR_INVALID,
                              "graph_annotate: \"%s\" (%s) cannot take Shard(%d) on mesh "
                              "dim %d: %s",
                              name, oari_shape_str(buf, gv->ndim, gv->shape), p.dim, d,
                              p.dim < 0 || p.dim >= gv->ndim ? "no such tensor dim"
                              : used[p.dim]                  ? "that tensor dim is already sharded"
                                                             : "that dim is dynamic");
        used[p.dim] = true;
    }
    if (mesh->coord[0] < 0)
        return oari_error(OAR_ERR_INVALID, "graph_annotate: this rank is outside the mesh");
    return set_dist_as(gv, mesh, placements, true);
}

/* ---- completion ----------------------------------------------------------- */

static void replicate(oar_placement *p, int nd) {
    for (int d = 0; d < nd; d++)
        p[d] = oar_replicate();
}

/* The plan of node n given placements cur[] of g's values: the rule's, or
 * all Replicate for an op without one. 0 or the error set. */
static int plan_node(const oar_graph *g, const oari_gnode *n, const oar_mesh *mesh,
                     oar_placement (*cur)[OAR_MESH_MAX_DIMS], oari_shard_plan *plan) {
    static _Thread_local oari_meta in[OARI_MAX_IN], out[OARI_MAX_OUT];
    static _Thread_local oar_placement in_p[OARI_MAX_IN][OAR_MESH_MAX_DIMS];
    const oari_op_def *def = oari_gnode_def(n);
    memset(plan, 0, sizeof *plan);
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) {
            in[k] = (oari_meta){.ndim = -1};
            replicate(in_p[k], mesh->ndim);
            continue;
        }
        const oari_gvalue *gv = &g->values[v];
        in[k] = (oari_meta){.dtype = gv->dtype, .ndim = gv->ndim};
        memcpy(in[k].shape, gv->shape, (size_t)gv->ndim * sizeof *gv->shape);
        memcpy(in_p[k], cur[v], sizeof in_p[k]);
    }
    for (int j = 0; j < n->n_out; j++) {
        const oari_gvalue *gv = &g->values[n->out[j]];
        out[j] = (oari_meta){.dtype = gv->dtype, .ndim = gv->ndim};
        memcpy(out[j].shape, gv->shape, (size_t)gv->ndim * sizeof *gv->shape);
    }
    int has = oari_is_ctrl(n->op)
                  ? 0
                  : oari_shard_rule(n->op, def, n->n_in, in, in_p, &n->attrs, out, mesh, plan);
    if (has < 0) return oari_fail_status();
    if (!has) {
        plan->local_attrs = false;
        for (int k = 0; k < n->n_in; k++)
            replicate(plan->in[k], mesh->ndim);
        for (int j = 0; j < n->n_out; j++)
            replicate(plan->out[j], mesh->ndim);
    }
    return 0;
}

/* Checks what completion and partition share: a graph they can handle
 * and annotations on this mesh. */
static int check_graph(const char *fn, const oar_graph *g, const oar_mesh *mesh,
                       bool annotated_only) {
    if (!g || !mesh) return oari_error(OAR_ERR_INVALID, "%s: graph or mesh is NULL", fn);
    if (g->n_syms)
        return oari_error(OAR_ERR_UNSUPPORTED,
                          "%s: the graph has dynamic dims (%s); trace it with fixed "
                          "shapes to partition it",
                          fn, g->syms[0].name);
    if (mesh->coord[0] < 0)
        return oari_error(OAR_ERR_INVALID, "%s: this rank is outside the mesh", fn);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && oari_is_ctrl(g->nodes[i].op))
            return oari_error(OAR_ERR_UNSUPPORTED,
                              "%s: node %d is a %s node; control flow is not "
                              "partitioned yet",
                              fn, i, oari_gnode_def(&g->nodes[i])->name);
    for (int v = 0; v < g->n_values; v++) {
        const oari_gdist *gd = g->values[v].dist;
        if (gd && (!annotated_only || gd->annotated) &&
            (gd->mesh != mesh->id || gd->ndim != mesh->ndim))
            return oari_error(OAR_ERR_INVALID,
                              "%s: value %%%d%s%s is placed on mesh %d (%d dims), not on "
                              "the given mesh %d (%d dims): mesh mismatch",
                              fn, v, g->values[v].name ? " " : "",
                              g->values[v].name ? g->values[v].name : "", gd->mesh, gd->ndim,
                              mesh->id, mesh->ndim);
    }
    return 0;
}

/* An unannotated input "<prefix>:x" (optimizer state) takes the
 * placements of annotated input or constant x of the same shape. */
static const oari_gdist *inherited(const oar_graph *g, const oari_gvalue *gv) {
    const char *colon = gv->name ? strrchr(gv->name, ':') : NULL;
    if (!colon) return NULL;
    int x = value_named(g, colon + 1);
    const oari_gdist *xd = x >= 0 ? g->values[x].dist : NULL;
    if (!xd || !xd->annotated || g->values[x].ndim != gv->ndim ||
        memcmp(g->values[x].shape, gv->shape, (size_t)gv->ndim * sizeof *gv->shape))
        return NULL;
    return g->values[x].dist;
}

static void output_target(const oar_graph *g, int j, int nd, oar_placement *p);

/* Partial dims of cur that `want` has Replicate: the value must be
 * reduced there for that consumer anyway. */
static bool reduced_for(const oar_placement *cur, const oar_placement *want, int nd,
                        oar_placement *fp) {
    bool hit = false;
    for (int d = 0; d < nd; d++)
        if (cur[d].kind == OAR_PLACEMENT_PARTIAL && want[d].kind == OAR_PLACEMENT_REPLICATE) {
            fp[d] = oar_replicate();
            hit = true;
        }
    return hit;
}

/* Completion: placements of node outputs from the rules, in node order,
 * overridden where forced[] says. Then the one cost rule: a Partial value
 * that some consumer (or the graph output) needs Replicate is reduced once
 * where it is made, for every consumer (forced), since its all-reduce is
 * paid anyway and consumers that would have kept Partial (a scaling, a
 * sum) would each reduce a value of their own later. Rounds until no value
 * is forced anew. */
int oar_graph_complete(oar_graph *g, oar_mesh *mesh) {
    int st = check_graph("graph_complete", g, mesh, true);
    if (st) return st;
    const int nv = g->n_values, nd = mesh->ndim;
    size_t cnt = (size_t)(nv ? nv : 1);
    oar_placement(*cur)[OAR_MESH_MAX_DIMS] = oari_calloc(cnt, sizeof *cur);
    oar_placement(*fp)[OAR_MESH_MAX_DIMS] = oari_calloc(cnt, sizeof *fp);
    bool *forced = oari_calloc(cnt, sizeof *forced);
    if (!cur || !fp || !forced) st = oari_fail_status();
    for (int v = 0; v < nv && !st; v++) {
        oari_gvalue *gv = &g->values[v];
        replicate(cur[v], nd);
        if (gv->kind == OARI_V_NODE) continue;
        /* annotated: kept; else inherited or Replicate (again, on a completion after a change) */
        const oari_gdist *own = gv->dist, *gd = own && own->annotated ? own : inherited(g, gv);
        if (gd) memcpy(cur[v], gd->p, (size_t)nd * sizeof *gd->p);
        st = set_dist_as(gv, mesh, cur[v], own && own->annotated);
    }
    oari_shard_plan plan;
    for (int round = 0; !st && round <= nv; round++) {
        for (int i = 0; i < g->n_nodes && !st; i++) {
            const oari_gnode *n = &g->nodes[i];
            if (n->dead || (st = plan_node(g, n, mesh, cur, &plan))) continue;
            for (int j = 0; j < n->n_out; j++)
                memcpy(cur[n->out[j]], forced[n->out[j]] ? fp[n->out[j]] : plan.out[j],
                       sizeof cur[0]);
        }
        bool changed = false;
        for (int i = 0; i < g->n_nodes && !st; i++) {
            const oari_gnode *n = &g->nodes[i];
            if (n->dead || (st = plan_node(g, n, mesh, cur, &plan))) continue;
            for (int k = 0; k < n->n_in; k++) {
                int v = n->in[k];
                if (v < 0 || g->values[v].kind != OARI_V_NODE || forced[v]) continue;
                memcpy(fp[v], cur[v], sizeof fp[v]);
                changed |= forced[v] = reduced_for(cur[v], plan.in[k], nd, fp[v]);
            }
        }
        for (int j = 0; j < g->n_outputs && !st; j++) {
            int v = g->outputs[j];
            if (g->values[v].kind != OARI_V_NODE || forced[v]) continue;
            oar_placement to[OAR_MESH_MAX_DIMS];
            output_target(g, j, nd, to);
            memcpy(fp[v], cur[v], sizeof fp[v]);
            changed |= forced[v] = reduced_for(cur[v], to, nd, fp[v]);
        }
        if (!changed) break;
    }
    for (int v = 0; v < nv && !st; v++)
        if (g->values[v].kind == OARI_V_NODE) st = set_dist(&g->values[v], mesh, cur[v]);
    oari_free(cur, cnt * sizeof *cur);
    oari_free(fp, cnt * sizeof *fp);
    oari_free(forced, cnt * sizeof *forced);
    return st;
}

/* ---- partition ------------------------------------------------------------ */

/* The placements output j of g is given in: those of input x for "grad:x"
 * and "next:x" of the same shape, else Replicate. */
static void output_target(const oar_graph *g, int j, int nd, oar_placement *p) {
    replicate(p, nd);
    const char *name = g->output_names[j];
    const char *rest = !strncmp(name, "grad:", 5) || !strncmp(name, "next:", 5) ? name + 5 : NULL;
    int x = rest ? value_named(g, rest) : -1;
    const oari_gvalue *ov = &g->values[g->outputs[j]];
    if (x < 0 || g->values[x].kind != OARI_V_INPUT || !g->values[x].dist ||
        g->values[x].ndim != ov->ndim ||
        memcmp(g->values[x].shape, ov->shape, (size_t)ov->ndim * sizeof *ov->shape))
        return;
    memcpy(p, ((const oari_gdist *)g->values[x].dist)->p, (size_t)nd * sizeof *p);
}

typedef struct part {
    const oar_graph *g;
    oar_graph *p;
    oar_mesh *mesh;
    int *loc;                                 /* per value of g: its value in p */
    oar_placement (*have)[OAR_MESH_MAX_DIMS]; /* per value of g: the placements loc[v] has */
    struct {
        int v, to;
        int64_t key[OAR_MESH_MAX_DIMS];
    } * memo; /* resharded values made so far */
    int n_memo, cap_memo;
} part;

static oari_co_kind kind_of(oar_placement a, oar_placement b) {
    if (a.kind == OAR_PLACEMENT_PARTIAL && b.kind == OAR_PLACEMENT_REPLICATE)
        return OARI_CO_ALL_REDUCE;
    if (a.kind == OAR_PLACEMENT_SHARD && b.kind == OAR_PLACEMENT_REPLICATE)
        return OARI_CO_ALL_GATHER;
    if (a.kind == OAR_PLACEMENT_PARTIAL && b.kind == OAR_PLACEMENT_SHARD)
        return OARI_CO_REDUCE_SCATTER;
    if (a.kind == OAR_PLACEMENT_REPLICATE && b.kind == OAR_PLACEMENT_SHARD) return OARI_CO_SHARD;
    return OARI_CO_RESHARD;
}

/* A local meta of g's value v under placements p. */
static oari_meta local_meta(const part *P, int v, const oar_placement *p) {
    const oari_gvalue *gv = &P->g->values[v];
    oari_meta m = {.dtype = gv->dtype, .ndim = gv->ndim};
    oari_co_local_shape(P->mesh->ndim, P->mesh->shape, P->mesh->coord, p, gv->ndim, gv->shape,
                        m.shape);
    return m;
}

/* p's value holding g's value v in placements `to`: loc[v] when they are
 * v's own, else collective nodes from them (one per mesh dim that
 * changes), made once per (v, to). -1 with the error set. */
static int resharded(part *P, int v, const oar_placement *to) {
    const oari_gvalue *gv = &P->g->values[v];
    const int nd = P->mesh->ndim;
    if (same_p(P->have[v], to, nd)) return P->loc[v];
    int64_t key[OAR_MESH_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++)
        key[d] = oari_co_pack(to[d]);
    for (int k = 0; k < P->n_memo; k++)
        if (P->memo[k].v == v && !memcmp(P->memo[k].key, key, sizeof key)) return P->memo[k].to;
    oar_placement cur[OAR_MESH_MAX_DIMS];
    memcpy(cur, P->have[v], sizeof cur);
    int id = P->loc[v];
    for (int d = 0; d < nd; d++) {
        if (same_p(&cur[d], &to[d], 1)) continue;
        oar_placement next[OAR_MESH_MAX_DIMS];
        memcpy(next, cur, sizeof next);
        next[d] = to[d];
        int op = oari_co_id(kind_of(cur[d], to[d]));
        if (op < 0) return -1;
        oari_attrs a = {.ni = 1 + OARI_CO_NATTR(nd, gv->ndim), .i = {op}};
        int64_t *x = a.i + 1;
        x[OARI_CO_MESH] = P->mesh->id;
        x[OARI_CO_MNDIM] = nd;
        x[OARI_CO_NDIM] = gv->ndim;
        x += OARI_CO_MSHAPE;
        for (int k = 0; k < nd; k++) {
            x[k] = P->mesh->shape[k];
            x[nd + k] = P->mesh->coord[k];
        }
        x += 2 * nd;
        for (int k = 0; k < gv->ndim; k++)
            x[k] = gv->shape[k];
        x += gv->ndim;
        for (int k = 0; k < nd; k++) {
            x[k] = oari_co_pack(cur[k]);
            x[nd + k] = oari_co_pack(next[k]);
        }
        /* a custom node has the row's OARI_MAX_OUT outputs; the unused ones are f32 scalars */
        oari_meta m[OARI_MAX_OUT] = {
            local_meta(P, v, next), {.dtype = OAR_F32}, {.dtype = OAR_F32}, {.dtype = OAR_F32}};
        int node = oari_graph_add_node(P->p, OARI_OP_custom, &a, 1, &id, OARI_MAX_OUT, m);
        if (node < 0) return -1;
        id = P->p->nodes[node].out[0];
        if (set_dist(&P->p->values[id], P->mesh, next)) return -1;
        memcpy(cur, next, sizeof cur);
    }
    if (P->n_memo == P->cap_memo) {
        int nc = P->cap_memo ? 2 * P->cap_memo : 16;
        void *q = oari_realloc(P->memo, (size_t)P->cap_memo * sizeof *P->memo,
                               (size_t)nc * sizeof *P->memo);
        if (!q) return -1;
        P->memo = q;
        P->cap_memo = nc;
    }
    P->memo[P->n_memo].v = v;
    P->memo[P->n_memo].to = id;
    memcpy(P->memo[P->n_memo].key, key, sizeof key);
    P->n_memo++;
    return id;
}

/* Inputs and constants of g into P->p, with local shapes (constants sliced). */
static int place_leaves(part *P) {
    const oar_graph *g = P->g;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        const oari_gvalue *gv = &g->values[v];
        const oari_gdist *gd = gv->dist;
        oari_meta m = local_meta(P, v, gd->p);
        int nv = oari_graph_add_value(P->p, OARI_V_INPUT, m.dtype, m.ndim, m.shape);
        if (nv < 0) return oari_fail_status();
        if (!(P->p->values[nv].name = oari_strdup(gv->name)) ||
            oari_gdist_dup(gd, &P->p->values[nv].dist) || oari_graph_add_input(P->p, nv))
            return oari_fail_status();
        P->loc[v] = nv;
    }
    for (int v = 0; v < g->n_values; v++) {
        const oari_gvalue *gv = &g->values[v];
        if (gv->kind != OARI_V_CONST) continue;
        const oari_gdist *gd = gv->dist;
        oar_placement rep[OAR_MESH_MAX_DIMS];
        replicate(rep, P->mesh->ndim);
        oar_tensor *l = oari_reshard_local(gv->constant, P->mesh, gv->shape, rep, gd->p);
        if (!l) return oari_fail_status();
        oar_pool *pool = oar_pool_push();
        oar_tensor *c = oar_contiguous(l);
        if (c)
            c = oari_pop_owned(pool, c);
        else
            oar_pool_pop(pool);
        oar_tensor_release(l);
        if (!c) return oari_fail_status();
        c->wrapped_number = gv->constant->wrapped_number;
        int nv = oari_graph_add_const(P->p, c, gv->name);
        oar_tensor_release(c);
        if (nv < 0 || oari_gdist_dup(gd, &P->p->values[nv].dist)) return oari_fail_status();
        P->loc[v] = nv;
    }
    return 0;
}

/* The nodes of g into P->p. Each reads its inputs in the placements its
 * plan wants (collectives inserted), and an output completion reduced
 * where it is made (a forced value) is resharded there. */
static int partition_nodes(part *P) {
    const oar_graph *g = P->g;
    const int nd = P->mesh->ndim;
    static _Thread_local oari_shard_plan plan;
    int st = 0;
    for (int v = 0; v < g->n_values; v++)
        memcpy(P->have[v], ((const oari_gdist *)g->values[v].dist)->p, sizeof P->have[v]);
    for (int i = 0; i < g->n_nodes && !st; i++) {
        const oari_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        /* completion's placements of the inputs are what they have by now */
        if ((st = plan_node(g, n, P->mesh, P->have, &plan))) break;
        int in[OARI_MAX_IN];
        for (int k = 0; k < n->n_in && !st; k++)
            if ((in[k] = n->in[k] < 0 ? -1 : resharded(P, n->in[k], plan.in[k])) < 0 &&
                n->in[k] >= 0)
                st = oari_fail_status();
        oari_meta out[OARI_GMAX_OUT];
        for (int j = 0; j < n->n_out && !st; j++)
            out[j] = local_meta(P, n->out[j], plan.out[j]);
        if (st) break;
        int node = oari_graph_add_node(P->p, n->op, plan.local_attrs ? &plan.attrs : &n->attrs,
                                       n->n_in, in, n->n_out, out);
        if (node < 0) {
            st = oari_fail_status();
            break;
        }
        P->p->nodes[node].segment = n->segment;
        P->p->nodes[node].recompute = n->recompute;
        for (int j = 0; j < n->n_out && !st; j++) {
            int v = n->out[j], nv = P->p->nodes[node].out[j];
            if ((st = set_dist(&P->p->values[nv], P->mesh, plan.out[j]))) break;
            oar_placement want[OAR_MESH_MAX_DIMS];
            memcpy(want, ((const oari_gdist *)g->values[v].dist)->p, sizeof want);
            P->loc[v] = nv;
            memcpy(P->have[v], plan.out[j], sizeof P->have[v]);
            if (same_p(want, plan.out[j], nd)) continue;
            if ((nv = resharded(P, v, want)) < 0) st = oari_fail_status();
            P->loc[v] = nv;
            memcpy(P->have[v], want, sizeof P->have[v]);
        }
    }
    return st;
}

oar_graph *oar_graph_partition(const oar_graph *g, oar_mesh *mesh) {
    if (check_graph("graph_partition", g, mesh, false)) return NULL;
    for (int v = 0; v < g->n_values; v++)
        if (!g->values[v].dist)
            return oari_error(OAR_ERR_STATE,
                              "graph_partition: value %%%d has no placements; call "
                              "oar_graph_complete first",
                              v),
                   NULL;
    if (oari_co_register()) return NULL;
    part P = {.g = g, .mesh = mesh};
    P.p = oari_graph_new();
    P.loc = oari_malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof *P.loc);
    P.have = oari_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *P.have);
    int st = P.p && P.loc && P.have ? 0 : oari_fail_status();
    for (int v = 0; v < g->n_values && !st; v++)
        P.loc[v] = -1;
    if (!st) st = place_leaves(&P);
    if (!st) st = partition_nodes(&P);
    if (!st && g->n_outputs) {
        P.p->outputs = oari_calloc((size_t)g->n_outputs, sizeof *P.p->outputs);
        P.p->output_names = oari_calloc((size_t)g->n_outputs, sizeof *P.p->output_names);
        if (P.p->outputs && P.p->output_names)
            P.p->n_outputs = g->n_outputs;
        else
            st = oari_fail_status();
        oar_placement to[OAR_MESH_MAX_DIMS];
        for (int j = 0; j < g->n_outputs && !st; j++) {
            output_target(g, j, mesh->ndim, to);
            if ((P.p->outputs[j] = resharded(&P, g->outputs[j], to)) < 0 ||
                !(P.p->output_names[j] = oari_strdup(g->output_names[j])))
                st = oari_fail_status();
        }
        if (st && P.p->outputs && !P.p->output_names) {
            oari_free(P.p->outputs, (size_t)g->n_outputs * sizeof *P.p->outputs);
            P.p->outputs = NULL;
        }
    }
    oari_free(P.loc, (size_t)(g->n_values ? g->n_values : 1) * sizeof *P.loc);
    oari_free(P.have, (size_t)(g->n_values ? g->n_values : 1) * sizeof *P.have);
    oari_free(P.memo, (size_t)P.cap_memo * sizeof *P.memo);
    if (st) {
        oar_graph_free(P.p);
        return NULL;
    }
    return P.p;
}

int oar_graph_count_collectives(const oar_graph *g, const char *name) {
    if (!g) return oari_error(OAR_ERR_INVALID, "graph_count_collectives: graph is NULL");
    if (oari_co_register()) return oari_fail_status();
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const oari_gnode *nd = &g->nodes[i];
        if (nd->dead || nd->op != OARI_OP_custom) continue;
        int k = oari_co_kind_of((int)nd->attrs.i[0]);
        n += k >= 0 && (!name || !strcmp(name, oari_co_name((oari_co_kind)k)));
    }
    return n;
}

int oar_graph_value_placements(const oar_graph *g, const char *name, oar_placement *placements) {
    if (!g || !name || !placements)
        return oari_error(OAR_ERR_INVALID,
                          "graph_value_placements: graph, name or placements is NULL");
    int v = value_named(g, name);
    for (int j = 0; v < 0 && j < g->n_outputs; j++)
        if (!strcmp(g->output_names[j], name)) v = g->outputs[j];
    if (v < 0)
        return oari_error(OAR_ERR_INVALID,
                          "graph_value_placements: no input, constant or output named \"%s\"",
                          name);
    const oari_gdist *gd = g->values[v].dist;
    if (!gd) return 0;
    memcpy(placements, gd->p, (size_t)gd->ndim * sizeof *placements);
    return gd->ndim;
}

/* ---- per-rank saved models ---------------------------------------------- */

#define INDEX_NAME "dist_index.json"

static int rank_dir(char *buf, size_t n, const char *dir, int rank) {
    int w = snprintf(buf, n, "%s/rank%d", dir, rank);
    if (w < 0 || (size_t)w >= n)
        return oari_error(OAR_ERR_INVALID, "graph_dist: path %s is too long", dir);
    return 0;
}

int oar_graph_save_dist(const oar_graph *part, const char *dir, oar_mesh *mesh) {
    if (!part || !dir || !mesh)
        return oari_error(OAR_ERR_INVALID, "graph_save_dist: graph, dir or mesh is NULL");
    if (mesh->coord[0] < 0)
        return oari_error(OAR_ERR_INVALID, "graph_save_dist: this rank is outside the mesh");
    char path[4096];
    int st = rank_dir(path, sizeof path, dir, oar_dist_rank());
    if (!st) st = oari_make_dirs(dir, 0755);
    if (!st) st = oar_graph_save(part, path);
    if (!st && oar_dist_rank() == 0) {
        char text[512];
        int len = snprintf(text, sizeof text,
                           "{\"format\": \"oar-dist-graph\", \"version\": 1, \"world\": %d, "
                           "\"mesh\": [",
                           oar_dist_world_size());
        for (int d = 0; d < mesh->ndim; d++)
            len += snprintf(text + len, sizeof text - (size_t)len, "%s%lld", d ? ", " : "",
                            (long long)mesh->shape[d]);
        len += snprintf(text + len, sizeof text - (size_t)len, "]}\n");
        if (!(st = rank_dir(path, sizeof path, dir, 0)))
            snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
        if (!st) st = oari_file_save(path, text, (size_t)len, "graph_save_dist");
    }
    /* every rank learns whether all saved (and the index exists before any returns) */
    char msg[600];
    snprintf(msg, sizeof msg, "%s", st ? oar_last_error() : "");
    int64_t bad = st != 0;
    for (int d = 0; d < mesh->ndim; d++)
        if (oari_sum_i64(&bad, mesh, d)) return oari_fail_status();
    if (st) return oari_error(st, "%s", msg);
    if (bad)
        return oari_error(OAR_ERR_IO, "graph_save_dist: %lld rank(s) failed to save into %s",
                          (long long)bad, dir);
    return 0;
}

/* Reads the index: world size and mesh shape. 0 or the error set. */
static int read_index(const char *dir, int *world, int *ndim, int64_t *shape) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
    FILE *f = fopen(path, "rb");
    if (!f)
        return oari_error(OAR_ERR_IO,
                          "graph_load_dist: cannot open %s (not a folder written by "
                          "oar_graph_save_dist)",
                          path);
    char text[512];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *w = strstr(text, "\"world\":"), *m = strstr(text, "\"mesh\": [");
    if (!strstr(text, "\"oar-dist-graph\"") || !w || !m)
        return oari_error(OAR_ERR_INVALID, "graph_load_dist: %s is malformed", path);
    *world = (int)strtol(w + 8, NULL, 10);
    const char *s = m + 9;
    *ndim = 0;
    while (*s && *s != ']' && *ndim < OAR_MESH_MAX_DIMS) {
        char *e;
        shape[(*ndim)++] = strtoll(s, &e, 10);
        if (e == s)
            return oari_error(OAR_ERR_INVALID, "graph_load_dist: %s has a malformed mesh", path);
        s = e;
        while (*s == ',' || *s == ' ')
            s++;
    }
    if (*world < 1 || *ndim < 1 || *s != ']')
        return oari_error(OAR_ERR_INVALID, "graph_load_dist: %s is malformed", path);
    return 0;
}

oar_graph *oar_graph_load_dist(const char *dir, oar_mesh *mesh) {
    if (!dir || !mesh)
        return oari_error(OAR_ERR_INVALID, "graph_load_dist: dir or mesh is NULL"), NULL;
    int world = 0, ndim = 0;
    int64_t shape[OAR_MESH_MAX_DIMS] = {0};
    if (read_index(dir, &world, &ndim, shape)) return NULL;
    if (world != oar_dist_world_size())
        return oari_error(OAR_ERR_INVALID,
                          "graph_load_dist: %s was saved by %d ranks; this world has %d: "
                          "partition the graph again for this world",
                          dir, world, oar_dist_world_size()),
               NULL;
    char a[200], b[200];
    if (ndim != mesh->ndim || memcmp(shape, mesh->shape, (size_t)ndim * sizeof *shape))
        return oari_error(OAR_ERR_INVALID,
                          "graph_load_dist: %s was partitioned for mesh %s, given mesh %s "
                          "(mesh mismatch)",
                          dir, oari_shape_str(a, ndim, shape),
                          oari_shape_str(b, mesh->ndim, mesh->shape)),
               NULL;
    if (mesh->coord[0] < 0)
        return oari_error(OAR_ERR_INVALID, "graph_load_dist: this rank is outside the mesh"), NULL;
    if (oari_co_register()) return NULL;
    char path[4096];
    if (rank_dir(path, sizeof path, dir, oar_dist_rank())) return NULL;
    oar_graph *g = oar_graph_load(path);
    if (!g) return NULL;
    /* mesh ids hold only in the process that made them: point them at `mesh` */
    for (int v = 0; v < g->n_values; v++) {
        oari_gdist *gd = g->values[v].dist;
        if (gd && gd->ndim != mesh->ndim) {
            oar_graph_free(g);
            return oari_error(OAR_ERR_INVALID,
                              "graph_load_dist: value %d of %s is placed on a %d-dim mesh "
                              "(mesh mismatch)",
                              v, path, gd->ndim),
                   NULL;
        }
        if (gd) gd->mesh = mesh->id;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        oari_gnode *n = &g->nodes[i];
        if (n->op == OARI_OP_custom && oari_co_kind_of((int)n->attrs.i[0]) >= 0)
            n->attrs.i[1 + OARI_CO_MESH] = mesh->id;
    }
    return g;
}

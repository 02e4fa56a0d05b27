/* The planner's internals (docs/internals/plan.md): the model container
 * (model.c), the cost model (cost.c), the search (search.c) and the
 * calibration (calib.c). Public API: include/oar/plan.h. */
#ifndef OARI_PLAN_H
#define OARI_PLAN_H

#include "../core/core.h"
#include <oar/plan.h>

struct oar_plan_model {
    char *name;
    int param_bytes;        /* 4: f32 training; 2: bf16 mixed precision (f32 master copy) */
    oar_plan_layer *layers; /* names owned */
    int n, cap;
};

/* Per-layer placement under tensor parallelism (oar_plan_result_placement). */
typedef enum oari_place {
    OARI_PLACE_REPLICATE = 0,
    OARI_PLACE_SHARD = 1,  /* pointwise on feature-sharded input */
    OARI_PLACE_COLUMN = 2, /* linear: R in, S out */
    OARI_PLACE_ROW = 3,    /* linear: S in, R out (all-reduce) */
    OARI_PLACE_BLOCK = 4,  /* a Megatron pair, sharded */
} oari_place;

OARI_HIDDEN const char *oari_place_name(oari_place p);

/* Checks cfg against m, c and the batch; 0 or OAR_ERR_INVALID with the
 * reason (no message set when quiet: for the search's pruning, which
 * words it itself into why). why (optional, >= 160 bytes) gets the reason. */
OARI_HIDDEN int oari_plan_check_config(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                                       const oar_plan_config *cfg, char *why, size_t cap);
/* The estimate of a checked config; place and stage (optional, m->n
 * entries each) get the placements and each layer's pipeline stage. Never
 * fails (out of scratch memory: an infinite step time). */
OARI_HIDDEN void oari_plan_estimate(const oar_plan_model *m, const oar_cluster *c, int64_t global_batch,
                                    const oar_plan_config *cfg, oar_plan_estimate *out, oari_place *place,
                                    int *stage);

#endif

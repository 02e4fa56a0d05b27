/* The predictor's internals that tests read (src/infer/predictor.c). */
#ifndef OARI_INFER_PREDICTOR_H
#define OARI_INFER_PREDICTOR_H

#include "../core/core.h"

#include <oar/infer.h>

/* The graph a run of p on these inputs takes: with several batch sizes
 * (oar_predictor_config.batches), the one packed for the inputs' batch,
 * else the first. p non-NULL. */
OARI_HIDDEN const oar_graph *oari_predictor_graph_for(const oar_predictor *p, oar_tensor *const *inputs);

#endif

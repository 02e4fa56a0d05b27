/* ZeRO stage 3's units, for oar_zero_forward (src/nn/zero3.c), which runs
 * modules and so lives in nn, above optim: zero.c keeps the shards and
 * moves the values; zero3.c finds the unit of a module and makes the
 * autograd node. */
#ifndef OARI_OPTIM_ZERO_H
#define OARI_OPTIM_ZERO_H

#include <oar/dist.h>

#include "../core/core.h"

/* 3 for stage 3 (which has units), else the stage. */
OARI_HIDDEN int oari_zero_stage(const oar_zero *z);
/* The unit whose parameters are exactly p[0..n) in order, or -1. */
OARI_HIDDEN int oari_zero_unit_of(const oar_zero *z, int n, oar_tensor *const *p);
/* Unit u's parameters (borrowed) into *p, their count returned. */
OARI_HIDDEN int oari_zero_unit_params(const oar_zero *z, int u, oar_tensor *const **p);
/* Unit u's anchor: a 0-d leaf that requires grad, the edge that makes
 * backward reach the unit's node (borrowed; its gradient stays unset). */
OARI_HIDDEN oar_tensor *oari_zero_unit_anchor(const oar_zero *z, int u);
/* All-gathers unit u's parameters (their locals view the gathered buffer)
 * / frees them (their locals read as zeros). 0 or the status. Gather is
 * collective. */
OARI_HIDDEN int oari_zero_unit_gather(oar_zero *z, int u);
OARI_HIDDEN int oari_zero_unit_release(oar_zero *z, int u);
/* Reduce-scatters unit u's parameter gradients g[0..n) (dtensors as
 * backward makes them, NULL for zeros) into this rank's gradient shard,
 * summed over micro-steps. 0 or the status. Collective. */
OARI_HIDDEN int oari_zero_unit_reduce(oar_zero *z, int u, oar_tensor *const *g);

#endif

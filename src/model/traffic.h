/*
 * traffic.h: the bytes one process sends in a training step's collectives, by what they are
 * for (DistPurpose), predicted from the settings and the process grid before anything runs:
 * the same buckets, groups and kinds of collective the engine will call, each costed by
 * dist_cost (the engine's own rule). `moe plan --config` prints it; `moe train` measures the
 * same in dist.csv (grad_sent, weight_sent, tp_sent, pp_sent) and tests/mpi/test_layouts.sh and
 * test_pp.sh hold the two together, byte for byte. A pipeline stage (dist.pp) counts its own
 * layers' buckets and sublayers, and its messages to its neighbours.
 *
 * The gradients' sums: once a step, every bucket of grad_sync.h summed over its group (an
 * all-reduce; under dist.zero >= 2 a reduce-scatter). The weights' gathers of dist.zero
 * (zero.h): each bucket all-gathered over its group after the update (1, 2), or each stage's
 * before the passes that use it and do not find it in a window (3). The expert exchange depends on
 * the routing, which no prediction knows: the planner prices it under uniform routing
 * (plan_moec_ep_bytes) and it is not here.
 */
#ifndef MOE_TRAFFIC_H
#define MOE_TRAFFIC_H

#include <stdint.h>

#include "config/config.h"
#include "parallel/dist.h"

/* sent[DIST_PURPOSES]: the bytes the process at d's place in the grid sends a step, with the
 * collectives of d->collectives (d from dist_grid_set: no job needed). */
void model_traffic_step(const Config *c, const Dist *d, uint64_t sent[DIST_PURPOSES]);

#endif

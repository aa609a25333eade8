/*
 * route_face.h: the model's routing as a training loop reads it, through functions rather
 * than the MoE blocks' own fields (Model.state.blocks[l].moe, the expert exchange's counters), so
 * that train/ needs neither moe/ nor model/ep.h: each block's routing statistics of a step, an
 * evaluation's routing by domain, the expert exchange's traffic, the experts' similarity and the
 * aux-free biases after a step. Blocks are named by their layer (inspect.h's model_is_moe says
 * which layers are MoE blocks).
 */
#ifndef MOE_MODEL_ROUTE_FACE_H
#define MOE_MODEL_ROUTE_FACE_H

#include <stdint.h>

#include "model/model.h"

/* What MoE block `layer`'s forward routed (after model_step_route: that micro-batch's), as the
 * block's route statistics hold it. Host memory, valid until the next forward. */
typedef struct {
    int E;
    int expert_choice;         /* 1: moe.routing=expert_choice (no drops, no padding by expert) */
    const float *load;         /* (E) each expert's fraction of the routed (or kept) assignments */
    const int *routed;         /* (E) assignments routed to each expert; expert choice: kept */
    const int *dropped;        /* (E) of those, dropped by a capacity */
    double drop, pad;          /* the dropped fraction, the padding rows' fraction */
    float entropy, top1;       /* the scores' mean entropy, the mean highest score */
    float max_logit, lse_mean; /* the largest |logit|, the mean logsumexp */
} RouteStatsView;
RouteStatsView model_route_stats(const Model *m, int layer);

/* maxvio and cv of a load vector (E) (moe/'s load_balance), for the readers of the routing */
void model_load_balance(float *maxvio, float *cv, const float *load, int E);

/* An evaluation's routing by domain: adds MoE block `layer`'s last forward (of N_last tokens,
 * domains (N_last) the domain of each) to counts (n_domains, E) and drops (2): the assignments
 * dropped and routed (expert choice: tokens no expert picked, and tokens). */
void model_route_domains(const Model *m, int layer, double *counts, double *drops,
                         const uint8_t *domains, int n_domains);

/* The expert exchange's counters (dist.ep > 1): zeroed before a step; then MoE block
 * `layer`'s of the step (a multi-token prediction module's: layer n_layer + k - 1) into row (7): bytes sent, received, seconds in the exchanges, the
 * experts' seconds, rows in, rows out to others, rows in from others. Returns 0 and leaves row
 * as it is for a block without an exchange. */
void model_comm_stats_reset(Model *m);
int model_comm_stats(const Model *m, int layer, double row[7]);
/* The seconds after the last backward spent waiting for the gradients' sums (grad_sync.h) */
double model_sync_wait_s(const Model *m);

/* router.csv's numbers of the model after a step, with one copy to the host: n_moe doubles,
 * each MoE block's mean expert similarity (uncomputed with dist.ep > 1, where no process
 * holds every expert), then (n_moe, E) floats, the aux-free biases. malloc'd: the caller
 * frees it. */
double *model_router_record(const Model *m);

#endif

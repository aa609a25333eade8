/*
 * train.h: the training loop and evaluation.
 *
 * One optimizer step: accum micro-batches of B sequences (forward, backward with loss scale
 * 1/accum), global-norm clipping, AdamW with the warm-up + cosine learning rate, then the
 * step's metrics. Evaluation, checkpoints and progress at their cadences.
 */
#ifndef MOE_TRAIN_H
#define MOE_TRAIN_H

#include "config/config.h"
#include "io/data.h"
#include "model/model.h"
#include "parallel/dist.h"

typedef struct {
    const char *out_dir;   /* run directory (created) */
    int resume;            /* continue the run in out_dir from its checkpoint */
    int quiet;             /* no progress display */
    int until;             /* stop (with a checkpoint) after this step; 0 = train.steps.
                              For schedulers with time limits, and to test resuming. */
    const char *init;      /* start from this checkpoint's weights (step 0, fresh AdamW moments
                              and data order); NULL: from the config's random init */
    Dist *dist;            /* the processes of the run (NULL or a world of one: this one) */
    int restart;           /* out_dir holds a run stopped before its first checkpoint: start it
                              again from step 0, replacing its files (`moe train --resume`) */
    int allow_data_change; /* resume even when the data's CRC-32 differs from provenance.txt's */
    const Config *stored;  /* resume: the checkpoint's settings, which config.txt must hold */
    /* the routing of this run's MoE blocks: written to record_routing, or replayed from
     * replay_routing (src/model/route_tape.h); NULL: neither. A run from step 0 on one process. */
    const char *record_routing, *replay_routing;
} TrainOptions;

/* Train per c. Returns 0, or exits with status 2 on bad input (data, checkpoint, run dir). */
int train_run(Config *c, const TrainOptions *o);

/* Per-domain routing counts of the MoE blocks, gathered during evaluation:
 * counts[(b * n_domains + d) * E + e] for MoE block b (0-based among MoE blocks).
 * drops (n_moe, 2), when not NULL: per block, the assignments dropped and the assignments
 * routed (token choice), or the tokens no expert picked and the tokens (expert choice). */
typedef struct {
    int n_moe, n_domains, E;
    double *counts;
    double *drops;
    double *loss_sum, *tokens; /* (n_domains) cross-entropy summed over each domain's tokens, and
                                  their count; NULL: not gathered */
} DomainCounts;

/* Mean cross-entropy over eval_batches validation batches; routing by domain is added to dc
 * when dc is not NULL. */
float evaluate(Model *m, const Shard *val, int eval_batches, DomainCounts *dc);

#endif

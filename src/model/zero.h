/*
 * zero.h: dist.zero, the training state sharded over the processes that hold copies of it
 * (ZeRO, Rajbhandari et al. 2020; PyTorch's FSDP).
 *
 * Data parallelism keeps a copy of every tensor on each member of the tensor's group (the
 * gradient bucket's group, grad_sync.h: the world for the non-expert tensors, the
 * data-parallel replicas of the same experts for the stacked expert tensors), and with them a
 * copy of the gradient and of the two AdamW moments: 16 bytes a parameter, repeated P times.
 * ZeRO keeps one copy of each state over the group instead: member p of P owns floats
 * [n p / P, n (p + 1) / P) of each bucket of n floats (dist_shard_range), and does the work
 * of those floats alone.
 *
 *   dist.zero=1  the AdamW moments of the member's shards only (Model.m, Model.v: the shards
 *                end to end, Zero.floats). The gradients are summed whole as before; each
 *                member updates its shard of the weights, and the weights are all-gathered
 *                bucket by bucket over the bucket's group (each gather starts as soon as its
 *                bucket's update is done, and travels while the next bucket's is computed).
 *   dist.zero=2  also the gradients: each bucket's sum becomes a reduce-scatter (the same
 *                buckets, started at the same points of the backward), which leaves a member
 *                the sum of its shard only, half the bytes of a sum. The whole gradient buffer
 *                is still allocated: the backward accumulates every tensor's gradient into it
 *                (a tensor's gradient is not summed until its block is done, and the
 *                micro-batches of train.accum add into it); what a member keeps after the
 *                reduce-scatter, the gradient the update reads, is its shard's.
 *   dist.zero=3  also the weights: Model.params holds the member's shards, and before each
 *                stage of the forward (the embedding, each block, the final norm and head)
 *                and again before its backward, the stage's weights are all-gathered into
 *                one of two windows, the views of its tensors pointed there (zero_weights),
 *                while the next stage's gather travels into the other window (a prefetch). A
 *                window still holding its stage is not gathered again (the head and the last
 *                block from the forward to the backward; the embedding's backward needs no
 *                weights); the update releases both. Two windows of the largest stage are
 *                what a member holds of the weights beside its shards. Not with a tied head
 *                (model.tied) or multi-token prediction (model.mtp_depth): their weights
 *                cross stages.
 *
 * The quantities of the whole batch stay exact: the gradient norm is each member's sum of the
 * squares of its shards, summed once over the world (every float of every gradient is in one
 * shard of one member of its group, and the groups of the experts' copies tile the world). A
 * run of one process has no group to shard over: dist.zero changes nothing there.
 *
 * Checkpoints stay free of the process count: a save gathers the moments' shards into whole
 * tensors (zero_whole), a load takes each member's shard of the whole (zero_shard_of).
 */
#ifndef MOE_ZERO_H
#define MOE_ZERO_H

#include <stddef.h>

#include "model/grad_sync.h"
#include "model/model.h"
#include "nn/ops.h"

/* a window's gathers in flight at once: what dist.h allows beside the gradients' sums
 * (GRAD_SYNC_WINDOW), the pipeline's sends (PIPE_FLIGHT, pipe.h) and one blocking collective
 * (the expert exchange's) */
#define ZERO_FLIGHT (DIST_MAX_IN_FLIGHT / 4 - 1)

typedef struct Zero {
    int stage;     /* dist.zero, 1 or more */
    size_t *at;    /* (GradSync.n) where each bucket's shard starts in the sharded moments */
    size_t floats; /* the shards' floats, end to end: the length of Model.m and Model.v */
    /* dist.zero=3: Model.params holds the weights' shards too (floats, laid out as the
     * moments), and the weights of a stage (GradBucket.stage: the head and final norm 0, block
     * l L - l, the embedding L + 1) are gathered into window stage % 2 before they are used,
     * the next stage's into the other window meanwhile */
    const Backend *be;
    int n_stages;       /* L + 2 */
    int *first;         /* (n_stages + 1) stage s's buckets: GradSync.b[first[s] ..
                           first[s + 1]) */
    size_t *pos;        /* (GradSync.n) where each bucket sits in its stage's window */
    size_t win_floats;  /* the largest stage's floats */
    float *win[2];      /* (win_floats) each, the backend's */
    float *win_host[2]; /* their host copies (staging), or NULL: gathered in place */
    int held[2];        /* the stage each window holds or is gathering; -1: none */
    int next[2];        /* its first bucket whose gather has not started */
    int nop[2];         /* its gathers in flight, oldest first: */
    DistOp *op[2][ZERO_FLIGHT];
    int op_bucket[2][ZERO_FLIGHT];
} Zero;

/* The floats of the shards of buckets b (n), end to end; the floats of the largest stage's
 * buckets (a window of dist.zero=3). */
size_t zero_shard_floats(const GradBucket *b, int n);
size_t zero_window_floats(const GradBucket *b, int n);

/* Shard s's buckets for d's member (grad_sync_shard; reduce-scatters from stage 2); from
 * stage 3, the two windows in be's memory. */
void zero_init(Zero *z, GradSync *s, const Dist *d, int stage, const Backend *be);
void zero_free(Zero *z);

/* dist.zero=3 (else nothing): the weights of stage gathered (waited for, or gathered now) and
 * the views of its tensors (Model.w) pointed into its window; then the gather of stage next
 * started into the other window (next out of 0 .. L + 1: none). */
void zero_weights(Model *m, int stage, int next);

/* model_adamw_step's update under dist.zero: AdamW on this member's shard of each bucket, with
 * each tensor's own weight decay where the shard meets it, the weights all-gathered over each
 * bucket's group, and the gradients left zero. */
void zero_adamw_step(Model *m, const AdamwStep *s);

/* dist.zero=3 (else nothing): every gather in flight waited for, and both windows emptied, as
 * after an update: the weights' shards may change next (a checkpoint loaded). */
void zero_release(Model *m);

/* The squares of this member's gradient shards, one a bucket, into the step record. */
void zero_norm_record(const Model *m);
/* The whole model's sum of squares from the record's sq (one a bucket): summed over the world. */
double zero_norm_squares(const Model *m, const double *sq);

/* Every member: the moments' shards (shard: Zero.floats) as one whole buffer of the backend
 * (pt.total floats, the caller releases it), gathered over each bucket's group. */
float *zero_whole(const Model *m, const float *shard);
/* shard (Zero.floats) = this member's shards of whole (pt.total floats). */
void zero_shard_of(const Model *m, const float *whole, float *shard);
/* The same from whole in the host's memory (the initial weights). */
void zero_shard_of_host(const Model *m, const float *whole, float *shard);

#endif

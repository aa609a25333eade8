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
 *   dist.zero=3  (not built yet) also the weights, each block's gathered before its forward
 *                and its backward.
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

typedef struct Zero {
    int stage;     /* dist.zero, 1 or more */
    size_t *at;    /* (GradSync.n) where each bucket's shard starts in the sharded moments */
    size_t floats; /* the shards' floats, end to end: the length of Model.m and Model.v */
} Zero;

/* The floats of the shards of buckets b (n), end to end. */
size_t zero_shard_floats(const GradBucket *b, int n);

/* Shard s's buckets for d's member (grad_sync_shard; reduce-scatters from stage 2). */
void zero_init(Zero *z, GradSync *s, const Dist *d, int stage);
void zero_free(Zero *z);

/* model_adamw_step's update under dist.zero: AdamW on this member's shard of each bucket, with
 * each tensor's own weight decay where the shard meets it, the weights all-gathered over each
 * bucket's group, and the gradients left zero. */
void zero_adamw_step(Model *m, const AdamwStep *s);

/* The squares of this member's gradient shards, one a bucket, into the step record. */
void zero_norm_record(const Model *m);
/* The whole model's sum of squares from the record's sq (one a bucket): summed over the world. */
double zero_norm_squares(const Model *m, const double *sq);

/* Every member: the moments' shards (shard: Zero.floats) as one whole buffer of the backend
 * (pt.total floats, the caller releases it), gathered over each bucket's group. */
float *zero_whole(const Model *m, const float *shard);
/* shard (Zero.floats) = this member's shards of whole (pt.total floats). */
void zero_shard_of(const Model *m, const float *whole, float *shard);

#endif

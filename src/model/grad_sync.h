/*
 * grad_sync.h: summing the gradients over the processes, in buckets, overlapped with the
 * backward pass (data parallelism; model_sync_grads).
 *
 * Every process computes the gradient of its share of the batch; before the optimizer step
 * each tensor's gradient is summed over the processes that hold a copy of it (non-expert
 * tensors: the world; expert tensors: the data-parallel replicas of the same experts). Two
 * ideas make that cheaper (they are PyTorch DDP's and picotron's):
 *
 *   buckets   neighbouring tensors of one block and one group are summed as one range of the
 *             gradient buffer, up to dist.bucket_mb: fewer, larger collectives, whose fixed
 *             cost (a latency per message) is paid once per bucket instead of per tensor;
 *   overlap   the backward pass finishes the blocks from the last to the first, and a block's
 *             gradients are final as soon as its backward is done (in the last micro-batch of
 *             the step): its buckets' sums start there and travel while the earlier blocks
 *             compute. Only what is still in flight when the backward ends is waited for
 *             (dist.csv's sync_wait_s).
 *
 * The sums are elementwise, so neither idea changes a result of the teaching collectives
 * (dist.collectives=teach): the same bits with or without them. MPI's own collectives may
 * pick another algorithm for another message size, which moves the last bits only.
 *
 * A nonblocking collective of MPI advances only while the process is inside an MPI call: the
 * backward calls dist_progress at every block boundary, which is all the help the sums in
 * flight get between two boundaries.
 *
 * A backend whose memory the host cannot read (a GPU's) has its gradients staged: a bucket
 * comes down into a host copy when it starts and goes back up when its sum is done. With the
 * backend's own collectives (NCCL) a bucket's sum is enqueued on the GPU's one stream, after
 * the kernels of the blocks already done and before the rest of the backward: the GPU runs
 * them in that order, so there the overlap saves the host's waits, not the GPU's time (that
 * would need the sums on a stream of their own).
 */
#ifndef MOE_GRAD_SYNC_H
#define MOE_GRAD_SYNC_H

#include <stddef.h>

#include "backend/backend.h"
#include "model/params.h"
#include "parallel/dist.h"

/* sums in flight at once: a quarter of what dist.h allows; the rest is for the weights' gathers
 * of dist.zero=3 (zero.h), the pipeline's sends (pipe.h) and the expert exchange */
#define GRAD_SYNC_WINDOW (DIST_MAX_IN_FLIGHT / 4)

typedef struct {
    size_t offset, numel; /* a range of the gradient buffer, in floats */
    DistGroup group;      /* the group that holds copies of its tensors: DIST_STAGE, DIST_DP
                             for stacked expert tensors, DIST_DATA for the tensor-parallel
                             shares (dist.tp > 1) */
    int stage;            /* when the backward has finished it: 0 after the head and final
                             norm, L - l after block l, L + 1 after the embedding */
    int t0, nt;           /* its tensors: pt->t[t0 .. t0 + nt) */
    size_t lo, hi;        /* this member's shard of it under dist.zero (dist_shard_range over
                             group), as offsets of the whole buffer; the whole bucket else */
} GradBucket;

typedef struct GradSync {
    GradBucket *b; /* (n) in stage order */
    int n;
    int next;                       /* the first bucket not started in this step */
    void *flight[GRAD_SYNC_WINDOW]; /* started, not yet waited (DistOp, or the backend's
                                       handle on_device): oldest at head */
    int bucket[GRAD_SYNC_WINDOW];   /* the bucket of each */
    int head, count;
    const Backend *be;
    int scatter;   /* dist.zero >= 2: reduce-scatters (each member's shard summed), not sums */
    int on_device; /* the backend's collectives sum the buckets in its memory */
    float *host;   /* the host copy of the gradients (staging), or NULL: summed in place */
    double wait_s; /* the last step's seconds in grad_sync_finish: the sums' exposed time */
} GradSync;

/* The buckets of pt's tensors in the order their sums start (stage order), as grad_sync_init
 * makes them: into *out (the caller frees it), their count returned. For the planner's count of
 * a step's traffic (model/traffic.h) as well. Each is whole (lo, hi its ends) until
 * grad_sync_shard. */
int grad_buckets(const ParamTable *pt, size_t bucket_floats, GradBucket **out);

/* Buckets of pt's tensors: tensors next to each other in the buffer, of the same block and
 * group, merged while the bucket stays within bucket_floats (0: one tensor a bucket). With
 * on_device, the backend's own collectives (Backend.coll_*, NCCL) sum the buckets where they
 * are; else d's, on the host (staged when the backend's memory is not the host's). */
void grad_sync_init(GradSync *s, const ParamTable *pt, size_t bucket_floats, const Backend *be,
                    int on_device);
/* The floats of a bucket at most: dist.bucket_mb's. */
static inline size_t grad_bucket_floats(const Config *c) {
    return (size_t)(c->bucket_mb * (1 << 20) / sizeof(float));
}
/* Each bucket's shard for d's member (dist_shard_range over the bucket's group); with scatter
 * (dist.zero >= 2) the sums become reduce-scatters: after grad_sync_finish a member's bucket
 * holds the sum in its shard only (and a staged bucket comes back up only there). */
void grad_sync_shard(GradSync *s, const Dist *d, int scatter);
void grad_sync_free(GradSync *s);

/* The backward has finished stage (GradBucket.stage): start the sums of its buckets over d
 * (waiting for the oldest in flight when GRAD_SYNC_WINDOW are), and let MPI advance the
 * others. */
void grad_sync_ready(GradSync *s, Dist *d, float *grads, int stage);

/* After the backward: start every bucket not started yet, wait for all, and start afresh for
 * the next step. */
void grad_sync_finish(GradSync *s, Dist *d, float *grads);

#endif
